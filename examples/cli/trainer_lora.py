"""A transformers.Trainer run of a tiny GPT-2 with peft LoRA: `gradviz doctor examples/cli/trainer_lora.py [--bug]`.

With --bug a forward hook detaches each LoRA adapter's output (a detached LoRA: the adapters get no gradient)."""

import argparse
import tempfile

import peft
import torch
import transformers

parser = argparse.ArgumentParser()
parser.add_argument("--bug", action="store_true")
parser.add_argument("--max-steps", type=int, default=10)
args = parser.parse_args()

torch.manual_seed(0)
config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=16, vocab_size=64)
model = peft.get_peft_model(transformers.GPT2LMHeadModel(config),
                            peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], lora_dropout=0.0))
if args.bug:
    for name, module in model.named_modules():
        if name.endswith("lora_A.default"):
            module.register_forward_hook(lambda m, inp, out: out.detach())  # the bug

ids = torch.randint(0, 64, (32, 12), generator=torch.Generator().manual_seed(1))
data = [{"input_ids": row, "labels": row} for row in ids]
with tempfile.TemporaryDirectory() as out:
    training = transformers.TrainingArguments(
        output_dir=out, use_cpu=True, report_to=[], save_strategy="no", max_steps=args.max_steps,
        per_device_train_batch_size=4, learning_rate=1e-3, disable_tqdm=True, logging_strategy="no", seed=0)
    transformers.Trainer(model=model, args=training, train_dataset=data).train()
print("training done")
