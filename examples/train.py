"""Fine-tune a Hugging Face model directory (Llama, Mistral, Qwen2 or GPT-2, with its
tokenizer.json) on a text file with zinf.Engine, and write the result as a Hugging Face
directory. One process per rank: `mpirun -np 2 python examples/train.py ...` for two.

  python examples/train.py MODEL_DIR TEXT_FILE [--steps 100] [--seq-len 1024]
      [--config examples/llama-3.2-1b-nvme.json] [--out build/finetuned] [--set KEY=VALUE ...]

The config's ZeRO and offload keys are used as they are; its model becomes MODEL_DIR's
weights and its checkpoint section --out. The fine-tuned model is OUT/global_step<N>/hf/.
"""
import argparse
import json
import os
import shutil

import numpy as np
import tokenizers
import tqdm

import zinf

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("model"), ap.add_argument("text")
ap.add_argument("--steps", type=int, default=100), ap.add_argument("--seq-len", type=int, default=1024)
ap.add_argument("--config", default="examples/llama-3.2-1b-nvme.json"), ap.add_argument("--out", default="build/finetuned")
ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
args = ap.parse_args()

# The text as one stream of ids, cut into windows of seq_len + 1 (the last seq_len are targets).
tokenizer = tokenizers.Tokenizer.from_file(f"{args.model}/tokenizer.json")
ids = np.array(tokenizer.encode(open(args.text, encoding="utf-8").read()).ids, dtype=np.int64)
windows = (len(ids) - 1) // args.seq_len
if windows < 1:
    raise SystemExit(f"{args.text}: {len(ids)} tokens hold no window of {args.seq_len} + 1; give more text or --seq-len")

config = json.load(open(args.config))
config.update(model={"init_from": args.model}, data={"seq_len": args.seq_len}, steps=args.steps,
              checkpoint={"dir": args.out}, zero_optimization={**config["zero_optimization"],
                                                                "stage3_gather_16bit_weights_on_model_save": True})
overrides = dict(s.split("=", 1) for s in args.set)
with zinf.Engine(config, set=overrides) as engine:
    order = np.random.default_rng(engine.config["seed"]).permutation(windows)
    micro, ranks, rank = engine.micro_batch, engine.world_size, engine.rank
    bar = tqdm.trange(args.steps, disable=rank != 0, unit="step")
    for step in bar:
        # This rank's micro-batches of the global batch, as `zinf train` samples them.
        first = step * engine.train_batch_size
        rows = [first + (m * ranks + rank) * micro + j for m in range(engine.gradient_accumulation_steps)
                for j in range(micro)]
        batch = np.stack([ids[w * args.seq_len:(w + 1) * args.seq_len + 1] for w in order[np.array(rows) % windows]])
        figures = engine.train_batch(batch)
        bar.set_postfix(loss=f"{figures['loss']:.4f}", lr=f"{figures['lr']:.2e}")
    engine.save_checkpoint(args.out)
    digest = engine.weights_digest()
    if rank == 0:  # the tokenizer beside the weights, so that from_pretrained finds both
        hf = f"{args.out}/global_step{engine.global_steps}/hf"
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if os.path.exists(f"{args.model}/{name}"):
                shutil.copy(f"{args.model}/{name}", hf)
        print(f"done: {args.steps} steps, final loss {figures['loss']:.4f}, weights {digest}; "
              f"the model: {hf}/")
