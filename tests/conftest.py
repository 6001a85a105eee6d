import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# the certificate cache of `qed prove` and `qed docs`: a fresh one for the run, shared by its
# xdist workers (one run id), so the suite proves from cold, each certificate once (test_claims
# stores what the docs drift test reads), and never reads or writes the repository's .qed_cache/
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
if _RUN:
    _dir = os.path.join(tempfile.gettempdir(), f"qed-cache-{_RUN}")
    os.makedirs(_dir, exist_ok=True)
    os.environ["QED_CACHE_DIR"] = _dir
else:
    os.environ["QED_CACHE_DIR"] = tempfile.mkdtemp(prefix="qed-cache-")


import pytest  # noqa: E402


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models: torch's intra-op threads only slow them down (badly, on a busy machine).
    A module that trains tiny models uses it with `pytestmark = pytest.mark.usefixtures(...)`."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(autouse=True)
def _fresh_passed_calls():
    """Each test starts with no remembered argument checks (`_validate._PASSED`): a test that
    patches a check to let everything through (tests/test_judge_edges.py) must not leave calls
    remembered as passed for the tests after it."""
    yield
    for backend in ("numpy", "torch"):
        module = sys.modules.get(f"generated.{backend}._validate")
        if module is not None:
            module._PASSED.clear()
