from .app.cli import main

main()
