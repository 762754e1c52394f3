"""Character-level tokenizer for the tiny local models (no model hub needed).

One token per character of printable ASCII plus newline and tab, and four specials. Encoding adds `<bos>` in front
(`add_special_tokens=True`, the default); `<eos>` ends a response. Decoding concatenates characters (no spaces
inserted); `skip_special_tokens=True` drops the specials. Saved/loaded as a plain `PreTrainedTokenizerFast`, so
`AutoTokenizer.from_pretrained(dir)` works offline and vLLM can use it.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)  # ids 0..3 in this order
CHARS = "\n\t" + "".join(chr(c) for c in range(32, 127))  # newline, tab, printable ASCII (space..~)

assert set(string.printable) - set("\r\x0b\x0c") == set(CHARS), "vocabulary covers printable ASCII"


def char_vocab() -> dict[str, int]:
    """Token -> id: specials first (pad=0, bos=1, eos=2, unk=3), then one id per character."""
    tokens = list(SPECIAL_TOKENS) + list(CHARS)
    return {tok: i for i, tok in enumerate(tokens)}


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = char_vocab()
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character alone
    core.decoder = decoders.Fuse()  # join characters without separators
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        padding_side="left",  # generation batches are left-padded
        clean_up_tokenization_spaces=False,
        model_max_length=2048,
    )
