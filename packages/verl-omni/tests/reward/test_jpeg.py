"""jpeg_compressibility reproduces E9 of docs/omni/math.md (definition in its §8)."""

import numpy as np
import PIL
import pytest
import torch

from verl_omni.reward import compute_score, jpeg_compressibility, jpeg_incompressibility, jpeg_sizes_kb

# tolerance in bytes across libjpeg builds; exact with Pillow 13.0.0 (the reference)
TOL_BYTES = 0 if PIL.__version__ == "13.0.0" else 64


def _check(images, want_bytes, want_reward):
    assert jpeg_sizes_kb(images)[0].item() * 1000 == pytest.approx(want_bytes, abs=TOL_BYTES)
    assert jpeg_compressibility(images)[0].item() == pytest.approx(want_reward, abs=TOL_BYTES / 500_000 + 1e-9)


def test_constant_gray_512():
    _check(torch.full((1, 3, 512, 512), 128, dtype=torch.uint8), 4721, -0.009442)


def test_black_512_and_white_64():
    _check(torch.zeros(1, 3, 512, 512, dtype=torch.uint8), 4723, -0.009446)
    _check(torch.full((1, 3, 64, 64), 255, dtype=torch.uint8), 691, -0.001382)


def test_uniform_noise_512():
    noise = np.random.default_rng(0).integers(0, 256, size=(512, 512, 3), dtype=np.uint8)  # HWC, drawn as uint8
    tol = TOL_BYTES * 20
    size = jpeg_sizes_kb(noise)[0].item() * 1000
    assert size == pytest.approx(307_993, abs=tol)
    assert jpeg_compressibility(noise)[0].item() == pytest.approx(-0.615986, abs=tol / 500_000 + 1e-9)


def test_float_ramp_64_rounds_half_to_even():
    ramp = torch.linspace(0, 1, 12288, dtype=torch.float32).reshape(1, 3, 64, 64)
    _check(ramp, 1042, -0.002084)


def test_sign_and_batch():
    imgs = torch.stack(
        [torch.zeros(3, 64, 64, dtype=torch.uint8), torch.randint(0, 256, (3, 64, 64), dtype=torch.uint8)]
    )
    comp, incomp = jpeg_compressibility(imgs), jpeg_incompressibility(imgs)
    assert comp.shape == (2,) and comp[0] > comp[1]  # smaller file = higher reward
    torch.testing.assert_close(comp, -incomp / 500)


def test_bad_shape_names_images():
    with pytest.raises(ValueError, match="images"):
        jpeg_compressibility(torch.zeros(1, 4, 8, 8))


def test_compute_score_single_image():
    img = torch.full((3, 512, 512), 128, dtype=torch.uint8)
    assert compute_score(img) == pytest.approx(-0.009442, abs=TOL_BYTES / 500_000 + 1e-9)
