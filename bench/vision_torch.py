#!/usr/bin/env python3
"""vision_torch.py - transformers' side of bench/bench_vision.sh: a LLaVA's
vision tower and projector (get_image_features: CLIP, the hidden state -2,
the class token dropped, the 2-layer GELU projector), float32 on the CPU,
timed forward and forward + backward; one line of KEY=VALUE pairs a run.

    vision_torch.py make SIZE DIR NIMG   write a random LlavaForConditionalGeneration of the tower SIZE
                                         (tiny: tiny-vl's, image 30, patch 6, hidden 64, 3 layers;
                                         vitb16: ViT-B/16's, image 224, patch 16, hidden 768, 12 layers)
                                         to DIR/model, NIMG images of normalised pixels to DIR/pixels.f32
                                         and d(loss)/d(features) to DIR/dfeat.f32, for vision_bench
    vision_torch.py time DIR STEPS       time get_image_features on DIR's pixels: forward without
                                         gradients, and forward + backward of sum(features * dfeat) into
                                         the tower's and the projector's weights (median of STEPS after one
                                         warm-up); check= is that sum, for vision_bench's to be put beside

Threads: $SW_THREADS, else every core (torch.set_num_threads).
"""
import os
import sys
import time

import numpy as np
import torch
from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

threads = int(os.environ.get("SW_THREADS", "0")) or os.cpu_count()
torch.set_num_threads(threads)

TOWERS = {
    "tiny": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4, image_size=30,
                 patch_size=6),
    "vitb16": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                   image_size=224, patch_size=16),
}


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def make(size, d, nimg):
    vc = CLIPVisionConfig(hidden_act="quick_gelu", projection_dim=128, **TOWERS[size])
    # a small text model: the bench times the tower and the projector only
    tc = LlamaConfig(vocab_size=262, hidden_size=128, intermediate_size=384, num_hidden_layers=1,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    n = (vc.image_size // vc.patch_size) ** 2
    cfg = LlavaConfig(vision_config=vc, text_config=tc, image_token_index=261, image_seq_length=n)
    torch.manual_seed(1)
    model = LlavaForConditionalGeneration(cfg)
    model.save_pretrained(os.path.join(d, "model"))
    g = np.random.default_rng(2)
    g.standard_normal((nimg, 3, vc.image_size, vc.image_size), dtype=np.float32).tofile(os.path.join(d, "pixels.f32"))
    g.standard_normal((nimg * n, tc.hidden_size), dtype=np.float32).tofile(os.path.join(d, "dfeat.f32"))
    tower = sum(p.numel() for k, p in model.named_parameters() if "vision_tower" in k)
    proj = sum(p.numel() for k, p in model.named_parameters() if "multi_modal_projector" in k)
    print(f"tower_params={tower} projector_params={proj} tokens={n} image={vc.image_size}")


def time_(d, steps):
    model = LlavaForConditionalGeneration.from_pretrained(os.path.join(d, "model"), dtype=torch.float32)
    cfg = model.config
    S, H = cfg.vision_config.image_size, cfg.text_config.hidden_size
    px = torch.from_numpy(np.fromfile(os.path.join(d, "pixels.f32"), dtype=np.float32)).view(-1, 3, S, S)
    dfeat = torch.from_numpy(np.fromfile(os.path.join(d, "dfeat.f32"), dtype=np.float32)).view(-1, H)
    for n, p in model.named_parameters():
        p.requires_grad_("vision_tower" in n or "multi_modal_projector" in n)

    def feats():
        f = model.model.get_image_features(pixel_values=px, vision_feature_layer=cfg.vision_feature_layer,
                                           vision_feature_select_strategy=cfg.vision_feature_select_strategy)
        return torch.cat(list(f.pooler_output), 0)

    fwd, both, check = [], [], 0.0
    for i in range(steps + 1):
        t0 = time.perf_counter()
        with torch.no_grad():
            f = feats()
        t1 = time.perf_counter()
        model.zero_grad(set_to_none=False)
        t2 = time.perf_counter()
        loss = (feats() * dfeat).sum()
        loss.backward()
        t3 = time.perf_counter()
        check = float((f.double() * dfeat.double()).sum())
        if i:
            fwd.append(t1 - t0)
            both.append(t3 - t2)
    print(f"fwd_s={median(fwd):.5f} fwdbwd_s={median(both):.5f} images={px.shape[0]} check={check:.6e} "
          f"threads={threads} attn={model.config.vision_config._attn_implementation}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) == 4 and sys.argv[1] == "time":
        time_(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)
