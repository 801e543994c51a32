"""The lab's timing benches and tables that are not a notebook or a study's CLI command: each
module has ``run(**options)`` (what the registry calls, in process) and ``main()`` (its command
line: ``python scripts/NAME.py`` or ``python -m ddtree_lab.experiments.benches.NAME``)."""
