"""Loaded by `import torch` through the `torch.backends` entry point
(pyproject.toml), as PyTorch loads out-of-tree devices: it imports lazyjit, so
that `torch.device("lazyjit")`, `device_map="lazyjit"` and
`DIFFUSERS_TEST_DEVICE=lazyjit` work in a program that never imports lazyjit.
TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns it off, as for every such device.

A module of its own, outside the package: when lazyjit cannot be imported (its
extension not built yet, or being rebuilt), `import torch` still works and says
why once, instead of failing for every program in the environment."""
import warnings


def load() -> None:
    try:
        import lazyjit  # noqa: F401  registers the device, the c10d backend, the dynamo backend
    except ImportError as e:
        warnings.warn(f"lazyjit: not loaded with torch ({e}); `import lazyjit` raises the same", stacklevel=2)
