import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


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
