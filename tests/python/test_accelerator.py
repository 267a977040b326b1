"""torch.accelerator on the lazyjit device (tracer/lazy_storage.cpp's device
allocator, tracer/device_memory.h), and `param.data = t` across the CPU and
lazyjit (tracer/api.cpp), as accelerate and diffusers use them."""
import torch

import lazyjit  # noqa: F401


def test_the_accelerator_is_lazyjit():
    assert torch.accelerator.current_accelerator().type == "lazyjit"
    assert torch.accelerator.device_count() == 1 and torch.accelerator.is_available()


def test_memory_allocated_counts_the_bytes_of_live_storages():
    torch.accelerator.synchronize()
    base = torch.accelerator.memory_allocated()
    torch.accelerator.reset_peak_memory_stats()
    x = torch.empty(1000, 250, device="lazyjit")  # 1,000,000 bytes
    assert torch.accelerator.memory_allocated() - base == 1_000_000
    y = (x.to(torch.float64) * 2)[:10]  # a new 2,000,000-byte storage; the view adds none
    assert torch.accelerator.memory_allocated() - base == 3_000_000
    peak = torch.accelerator.max_memory_allocated()
    del x, y
    assert torch.accelerator.memory_allocated() == base
    assert torch.accelerator.max_memory_allocated() == peak >= base + 3_000_000
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == base


def test_storage_resizes_are_counted():
    base = torch.accelerator.memory_allocated()
    x = torch.zeros(100, device="lazyjit")
    x.untyped_storage().resize_(0)  # FSDP frees a parameter's memory so
    assert torch.accelerator.memory_allocated() == base
    x.untyped_storage().resize_(800)
    assert torch.accelerator.memory_allocated() == base + 800
    del x
    assert torch.accelerator.memory_allocated() == base


def test_memory_stats_and_empty_cache():
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.accelerator.memory_allocated()
    x = torch.randn(64, 64).to("lazyjit")
    (x @ x).relu().sum().item()  # a program, whose buffers the runtime pools
    torch.accelerator.empty_cache()
    torch.testing.assert_close((x @ x).relu().sum().cpu(), (x.cpu() @ x.cpu()).relu().sum())
    free, total = torch.accelerator.get_memory_info()
    assert 0 < free <= total


def test_param_data_moves_between_cpu_and_lazyjit():
    p = torch.nn.Parameter(torch.ones(3))
    p.data = torch.arange(3.0).to("lazyjit")
    assert p.device.type == "lazyjit" and p.requires_grad
    (p * p).sum().backward()
    torch.testing.assert_close(p.grad.cpu(), 2 * torch.arange(3.0))
    p.data = torch.full((2,), 5.0)
    assert p.device.type == "cpu"
    torch.testing.assert_close(p.detach(), torch.full((2,), 5.0))
