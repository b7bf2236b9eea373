#!/usr/bin/env python3
"""grpo_trl.py - the peer of bench/bench_grpo.sh: TRL's GRPOTrainer on CPU.

    python3 bench/grpo_trl.py make DIR
        write a random model of SmolLM2-135M's shapes (Llama family: hidden 576,
        30 layers, 9 heads, 3 KV heads, intermediate 1536, vocabulary 49152,
        tied embeddings) in f32 safetensors with a byte-level BPE tokenizer of
        exactly 49152 tokens (256 bytes, then byte pairs, then 3 specials), so
        that every id the random model samples decodes on both sides
    python3 bench/grpo_trl.py run DIR PROMPTS.jsonl ITERS OUT.json [bf16]
        train ITERS GRPO steps with TRL on the prompts (8 a step, 8 responses
        each, 64 new tokens, KL to a frozen reference with beta 0.04, one AdamW
        step a batch, 2 threads), timing each step (generation, reference
        log-probs, loss, backward, AdamW) with a callback; writes the step
        times and the process's peak RSS to OUT.json; with bf16, GRPOConfig's
        bf16=True (autocast to bf16 on the CPU, f32 master weights)

The reward is DAPO's soft overlong punishment on characters (L=120, C=60), the
same as `sw-verify -r length,max=120,buffer=60,unit=chars` on the other side:
cheap, and it varies across a group, so the advantages are not zero.
"""
import json
import resource
import sys
import time


def make(d):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    V = 49152
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    alphabet.sort()
    vocab = {c: i for i, c in enumerate(alphabet)}
    merges = []
    for a in alphabet:
        for b in alphabet:
            if len(vocab) == V - len(specials):
                break
            vocab[a + b] = len(vocab)
            merges.append((a, b))
    for s in specials:
        vocab[s] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    assert tok.get_vocab_size() == V
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.save_pretrained(d)

    cfg = LlamaConfig(vocab_size=V, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                      rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True,
                      bos_token_id=None, eos_token_id=vocab["<|im_end|>"], pad_token_id=vocab["<|endoftext|>"],
                      torch_dtype="float32")
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg)
    m.save_pretrained(d, safe_serialization=True)
    n = sum(p.numel() for p in m.parameters())
    print(f"grpo_trl: wrote {d}: {n / 1e6:.1f}M parameters, vocabulary {V}")


def overlong(completions, **_):
    L, C = 120, 60
    out = []
    for c in completions:
        n = len(c)
        out.append(0.0 if n <= L - C else (-1.0 if n >= L else (L - C - n) / C))
    return out


def run(d, prompts, iters, out, bf16=False):
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(2)
    rows = [json.loads(l) for l in open(prompts, encoding="utf-8") if l.strip()]
    ds = Dataset.from_list([{"prompt": r["prompt"]} for r in rows])

    class Clock(TrainerCallback):
        def __init__(self):
            self.steps = []
            self.t0 = None

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.steps.append(time.perf_counter() - self.t0)

    args = GRPOConfig(output_dir=out + ".trl", per_device_train_batch_size=64, num_generations=8,
                      gradient_accumulation_steps=1, max_completion_length=64, temperature=1.0,
                      beta=0.04, learning_rate=1e-6, max_steps=iters, use_cpu=True, bf16=bf16,
                      logging_steps=1, save_strategy="no", report_to="none", seed=1,
                      dataloader_num_workers=0, shuffle_dataset=False)
    clock = Clock()
    trainer = GRPOTrainer(model=d, reward_funcs=overlong, args=args, train_dataset=ds, callbacks=[clock])
    trainer.train()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    json.dump({"step_s": clock.steps, "peak_rss": peak, "torch": torch.__version__, "bf16": bf16,
               "threads": torch.get_num_threads()}, open(out, "w"))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) in (6, 7) and sys.argv[1] == "run" and sys.argv[6:] in ([], ["bf16"]):
        run(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6:] == ["bf16"])
    else:
        sys.exit(__doc__)
