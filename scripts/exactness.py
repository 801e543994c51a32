"""The command line of ``ddtree_lab.experiments.benches.exactness`` (what it measures: its docstring;
``ddtree-lab run`` calls its ``run`` in process)."""
from ddtree_lab.experiments.benches.exactness import main

if __name__ == "__main__":
    main()
