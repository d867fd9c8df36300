"""The PyTorch benchmark: ``python benchmarks/torch_bench.py`` is ``python -m linops bench
torch`` (see ``linops/_app/torch.py`` for what it measures)."""

import sys

from linops._app.torch import main

if __name__ == "__main__":
    main(sys.argv[1:])
