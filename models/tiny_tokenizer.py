"""A small byte-level BPE tokenizer for tiny test checkpoints (any text encodes; ids < vocab_size).

Trained by `tokenizers` on a fixed corpus, so the same inputs give the same tokenizer.json.
"""

import json
import pathlib

CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 4,
    "Hello, how are you today? I am fine, thank you. What is the weather like?",
    "def main():\n    print('hello world')\n    return 0\n",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000. Letters: a b c d e f g h i j k l m n o p.",
    "vLLM serves large language models; tensors, kernels, attention, experts, tokens.",
]


def build(out_dir, vocab_size, special_tokens, bos, eos, chat_template=None):
    """Writes tokenizer.json and tokenizer_config.json into out_dir."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special_tokens),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(CORPUS, trainer)
    if tokenizer.get_vocab_size() > vocab_size:
        raise ValueError(f"tokenizer has {tokenizer.get_vocab_size()} ids, more than vocab_size {vocab_size}")
    out = pathlib.Path(out_dir)
    tokenizer.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": eos,
        "pad_token": eos,
        "model_max_length": 4096,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
    }
    if chat_template:
        config["chat_template"] = chat_template
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return {tok: tokenizer.token_to_id(tok) for tok in special_tokens}
