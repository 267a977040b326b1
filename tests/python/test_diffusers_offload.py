"""diffusers' offloading onto the lazyjit device (issue 49): model offloading
and group offloading work and equal eager, with and without streams (issue 52's
device module gives diffusers the streams and events it asks for)."""
import diffusers
import torch

import lazyjit  # noqa: F401


def unet():
    torch.manual_seed(0)
    return diffusers.UNet2DModel(sample_size=8, in_channels=3, out_channels=3, block_out_channels=(32, 64),
                                 norm_num_groups=32, layers_per_block=1,
                                 down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                 up_block_types=("AttnUpBlock2D", "UpBlock2D"))


def test_group_offloading_onto_lazyjit_matches_eager():
    x, t = torch.randn(1, 3, 8, 8), torch.tensor([3])
    with torch.no_grad():
        want = unet()(x, t).sample
    m = unet()
    m.enable_group_offload(onload_device=torch.device("lazyjit"), offload_type="block_level", num_blocks_per_group=1)
    with torch.no_grad():
        got = m(x.to("lazyjit"), t.to("lazyjit")).sample.cpu()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_group_offloading_with_streams_onto_lazyjit_matches_eager():
    x, t = torch.randn(1, 3, 8, 8), torch.tensor([3])
    with torch.no_grad():
        want = unet()(x, t).sample
    m = unet()
    m.enable_group_offload(onload_device=torch.device("lazyjit"), offload_type="block_level", num_blocks_per_group=1,
                           use_stream=True)
    with torch.no_grad():
        for _ in range(2):  # the second call onloads through the prefetch the first one set up
            got = m(x.to("lazyjit"), t.to("lazyjit")).sample.cpu()
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_model_cpu_offload_onto_lazyjit_matches_eager():
    def images(offload):
        pipe = diffusers.DDIMPipeline(unet=unet(), scheduler=diffusers.DDIMScheduler())
        if offload:
            pipe.enable_model_cpu_offload(device="lazyjit")
        return pipe(num_inference_steps=2, generator=torch.Generator().manual_seed(0), output_type="np").images

    want = images(False)
    got = images(True)
    assert abs(got - want).max() <= 1e-5
