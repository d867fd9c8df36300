"""PyTorch front end (draft)."""

from ._factorization import Factorization as Factorization
from ._factorization import factorize as factorize
from ._factorization import solve as solve
from ._store import ReleasedFactorizationError as ReleasedFactorizationError
from ._store import Stats as Stats
from ._store import reset_stats as reset_stats
from ._store import stats as stats
from ._matmul import matmul as matmul
from . import _family  # noqa: F401  (registers fam(θ) for torch θ)
from ._query_ops import inv_sample as inv_sample
from ._query_ops import logdet as logdet
from ._query_ops import slogdet as slogdet
