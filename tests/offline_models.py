"""Tiny models for the offline-readiness tests (tests/it/offline_ready.rs), and their loads.

`build OUT` writes one directory per case under OUT (OUT/<case>/), each a small model saved with
the real libraries' `save_pretrained` (tiny random configurations, nothing downloaded), then
damaged the way the case says, and OUT/cases.json describing them: the repository id each is
installed as, the revision it is installed at, and how to load it (every case goes into one
cache, so a case is the repository another case needs).

`load CACHE CASES_JSON` loads every case from the Hugging Face cache CACHE with the real
loaders (transformers, peft, sentence-transformers, diffusers; GGUF splits with gguf-py's
reader over llama.cpp's split naming) and prints {case: null | "error text"}. It is meant to
run in a network namespace with no network (`unshare -n`) and without HF_HUB_OFFLINE, so any
reach for the network fails loudly.
"""

import json
import logging
import os
import re
import shutil
import sys
import traceback

ORG = "airlock-test"
CHAT = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
WORDS = ["hello", "world", "the", "air", "gap", "model", "loads", "offline", "a", "b"]


def fast_tokenizer(cls_name="PreTrainedTokenizerFast"):
    """A word-level tokenizer built locally with `tokenizers`, wrapped in a transformers class."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<pad>": 3}
    for w in WORDS:
        vocab[w] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


def bpe_files(d):
    """vocab.json and merges.txt of a byte-level BPE (GPT-2 style)."""
    vocab = {"<|endoftext|>": 0}
    for c in "abcdefghijklmnopqrstuvwxyz\u0120":
        vocab[c] = len(vocab)
    merges = ["h e", "l l", "\u0120 w"]
    for m in merges:
        vocab[m.replace(" ", "")] = len(vocab)
    with open(os.path.join(d, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(d, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")


def tiny_llama(d, chat=True, tokenizer=True):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
    )
    LlamaForCausalLM(cfg).save_pretrained(d)
    if tokenizer:
        tok = fast_tokenizer()
        if chat:
            tok.chat_template = CHAT
        tok.save_pretrained(d)


def tiny_bert(d):
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, max_position_embeddings=64,
    )
    BertModel(cfg).save_pretrained(d)


def set_tokenizer_class(d, cls):
    p = os.path.join(d, "tokenizer_config.json")
    with open(p) as f:
        tc = json.load(f)
    tc["tokenizer_class"] = cls
    with open(p, "w") as f:
        json.dump(tc, f)


def model_type(d, t):
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": t}, f)


def rm(d, *names):
    for n in names:
        p = os.path.join(d, n)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)


REMOTE_CONFIG = '''
from transformers import PretrainedConfig
class XConfig(PretrainedConfig):
    model_type = "airlock-x"
    def __init__(self, hidden=4, **kw):
        self.hidden = hidden
        super().__init__(**kw)
'''
REMOTE_MODEL = '''
import torch
from transformers import PreTrainedModel
from .configuration_x import XConfig
from .helpers import width
class XModel(PreTrainedModel):
    config_class = XConfig
    def __init__(self, config):
        super().__init__(config)
        self.lin = torch.nn.Linear(width(config), width(config))
        self.post_init()
    def forward(self, x):
        return self.lin(x)
'''
REMOTE_HELPERS = '''
def width(config):
    return config.hidden
'''


def remote_code_model(d, auto_map):
    """A model whose classes live in its own Python files (trust_remote_code)."""
    import torch
    from safetensors.torch import save_file

    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "airlock-x", "hidden": 4, "architectures": ["XModel"], "auto_map": auto_map}, f)
    torch.manual_seed(0)
    save_file({"lin.weight": torch.randn(4, 4), "lin.bias": torch.randn(4)}, os.path.join(d, "model.safetensors"),
              metadata={"format": "pt"})


def write_code(d, helpers=True):
    for name, text in [("configuration_x.py", REMOTE_CONFIG), ("modeling_x.py", REMOTE_MODEL),
                       ("helpers.py", REMOTE_HELPERS)]:
        if name == "helpers.py" and not helpers:
            continue
        with open(os.path.join(d, name), "w") as f:
            f.write(text)


def peft_adapter(d, base_dir, base_id):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_dir)
    model = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    model.save_pretrained(d)
    p = os.path.join(d, "adapter_config.json")
    with open(p) as f:
        c = json.load(f)
    c["base_model_name_or_path"] = base_id
    with open(p, "w") as f:
        json.dump(c, f)


def st_model(d, dense=False):
    from sentence_transformers import SentenceTransformer, models

    tmp = d + ".bert"
    tiny_bert(tmp)
    fast_tokenizer("BertTokenizerFast").save_pretrained(tmp)
    word = models.Transformer(tmp)
    mods = [word, models.Pooling(word.get_word_embedding_dimension(), "mean")]
    if dense:
        mods.append(models.Dense(16, 8))
    mods.append(models.Normalize())
    SentenceTransformer(modules=mods).save_pretrained(d)
    shutil.rmtree(tmp)


def ddpm(d):
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    unet = UNet2DModel(
        sample_size=8, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(8, 8),
        down_block_types=("DownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
    )
    DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=10)).save_pretrained(d)


def gguf_splits(d, count):
    import numpy as np
    import gguf

    os.makedirs(d, exist_ok=True)
    for i in range(count):
        w = gguf.GGUFWriter(os.path.join(d, f"tiny-{i + 1:05d}-of-{count:05d}.gguf"), "llama")
        w.add_uint16("split.no", i)
        w.add_uint16("split.count", count)
        w.add_int32("split.tensors.count", count)
        w.add_tensor(f"t{i}", np.full(4, i, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def tiny_vit(d):
    """An image classifier with its image processor (preprocessor_config.json)."""
    import torch
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=32,
        patch_size=8,
        num_channels=3,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=8,
        num_labels=2,
    )
    ViTForImageClassification(config).save_pretrained(d)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(d)


def nest_image_processor(d):
    """transformers' newer layout: the image processor's config nested in processor_config.json."""
    with open(os.path.join(d, "preprocessor_config.json")) as f:
        nested = {"image_processor": json.load(f)}
    rm(d, "preprocessor_config.json")
    with open(os.path.join(d, "processor_config.json"), "w") as f:
        json.dump(nested, f)


def tiny_wav2vec2(d):
    """An audio classifier with its feature extractor (preprocessor_config.json)."""
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2FeatureExtractor, Wav2Vec2ForSequenceClassification

    torch.manual_seed(0)
    config = Wav2Vec2Config(
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=8,
        conv_dim=(8, 8),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        num_labels=2,
        classifier_proj_size=4,
    )
    Wav2Vec2ForSequenceClassification(config).save_pretrained(d)
    Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000).save_pretrained(d)


def build(out):
    os.makedirs(out, exist_ok=True)
    cases = {}

    def case(name, load, revision=None):
        cases[name] = {"repo": f"{ORG}/{name}", "load": load, "revision": revision}
        return os.path.join(out, name)

    # transformers: a causal LM with tokenizer and chat template, loaded and chatted with.
    tiny_llama(case("llama-ready", "causal+chat"))
    tiny_llama(case("llama-no-chat-template", "causal+chat"), chat=False)
    tiny_llama(case("llama-plain-no-chat-template", "causal"), chat=False)
    d = case("llama-tokenizer-json-missing", "causal")
    tiny_llama(d)
    rm(d, "tokenizer.json")
    d = case("llama-sp-class-no-files", "causal")
    tiny_llama(d)
    set_tokenizer_class(d, "LlamaTokenizer")
    rm(d, "tokenizer.json")
    d = case("llama-weights-missing", "causal")
    tiny_llama(d)
    rm(d, "model.safetensors")
    d = case("llama-config-missing", "causal")
    tiny_llama(d)
    rm(d, "config.json")
    d = case("chat-template-in-config", "causal+chat")
    tiny_llama(d, chat=False)
    with open(os.path.join(d, "tokenizer_config.json")) as f:
        tc = json.load(f)
    tc["chat_template"] = CHAT
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f)
    # BPE and WordPiece tokenizers from their vocabulary files alone.
    # transformers 5's AutoTokenizer reads config.json first (AutoConfig), even with a
    # tokenizer_class in tokenizer_config.json.
    d = case("gpt2-bpe-files", "tokenizer")
    os.makedirs(d)
    bpe_files(d)
    model_type(d, "gpt2")
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer"}, f)
    d = case("gpt2-bpe-merges-missing", "tokenizer")
    os.makedirs(d)
    bpe_files(d)
    model_type(d, "gpt2")
    rm(d, "merges.txt")
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer"}, f)
    d = case("gpt2-tokenizer-without-config", "tokenizer")
    os.makedirs(d)
    bpe_files(d)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer"}, f)
    d = case("bert-wordpiece-vocab", "tokenizer")
    os.makedirs(d)
    model_type(d, "bert")
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS) + "\n")
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "BertTokenizer"}, f)
    d = case("bert-wordpiece-vocab-missing", "tokenizer")
    os.makedirs(d)
    model_type(d, "bert")
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "BertTokenizer"}, f)

    # Remote code: local modules and their relative imports, and code from another repository.
    local = {"AutoConfig": "configuration_x.XConfig", "AutoModel": "modeling_x.XModel"}
    d = case("remote-code-ready", "remote")
    remote_code_model(d, local)
    write_code(d)
    d = case("remote-code-sibling-missing", "remote")
    remote_code_model(d, local)
    write_code(d, helpers=False)
    d = case("remote-code-module-missing", "remote")
    remote_code_model(d, local)
    write_code(d)
    rm(d, "modeling_x.py")
    # Imports transformers' check_imports requires to be installed packages: a sibling by its
    # plain name (never fetched), and transformers' own module cache (empty on a fresh target);
    # and a plain import inside a try block, which get_imports skips (loads).
    for name, line in [
        ("remote-code-plain-sibling-import", "from helpers import width"),
        ("remote-code-transformers-modules-import",
         "from transformers_modules.airlock_test.gone.helpers import width"),
        ("remote-code-guarded-import",
         "from .helpers import width\ntry:\n    import helpers\nexcept ImportError:\n    pass"),
    ]:
        d = case(name, "remote")
        remote_code_model(d, local)
        write_code(d)
        with open(os.path.join(d, "modeling_x.py"), "w") as f:
            f.write(REMOTE_MODEL.replace("from .helpers import width", line))
    code = f"{ORG}/x-code"
    d = case("x-code", "none")
    os.makedirs(d)
    write_code(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "airlock-x"}, f)
    other = {"AutoConfig": f"{code}--configuration_x.XConfig", "AutoModel": f"{code}--modeling_x.XModel"}
    remote_code_model(case("remote-code-other-repo-present", "remote"), other)
    gone = f"{ORG}/x-code-not-carried"
    remote_code_model(
        case("remote-code-other-repo-absent", "remote"),
        {"AutoConfig": f"{gone}--configuration_x.XConfig", "AutoModel": f"{gone}--modeling_x.XModel"},
    )

    # peft: the adapter's base from the same cache.
    base_dir = case("lora-base", "causal")
    tiny_llama(base_dir)
    peft_adapter(case("lora-base-present", "peft"), base_dir, f"{ORG}/lora-base")
    peft_adapter(case("lora-base-absent", "peft"), base_dir, f"{ORG}/lora-base-not-carried")
    d = case("lora-weights-missing", "peft")
    peft_adapter(d, base_dir, f"{ORG}/lora-base")
    rm(d, "adapter_model.safetensors")

    # sentence-transformers.
    st_model(case("st-ready", "st"))
    d = case("st-pooling-missing", "st")
    st_model(d)
    rm(d, "1_Pooling")
    d = case("st-dense-weights-missing", "st")
    st_model(d, dense=True)
    rm(d, "2_Dense/model.safetensors")

    # diffusers.
    ddpm(case("ddpm-ready", "diffusers"))
    d = case("ddpm-scheduler-missing", "diffusers")
    ddpm(d)
    rm(d, "scheduler")
    d = case("ddpm-unet-weights-missing", "diffusers")
    ddpm(d)
    rm(d, "unet/diffusion_pytorch_model.safetensors")

    # GGUF splits.
    gguf_splits(case("gguf-splits-ready", "gguf"), 3)
    d = case("gguf-split-missing", "gguf")
    gguf_splits(d, 3)
    rm(d, "tiny-00002-of-00003.gguf")

    # transformers processors: a vision and an audio model read images / sound through the
    # config beside them (preprocessor_config.json, or processor_config.json's nested one).
    tiny_vit(case("vit-ready", "image"))
    d = case("vit-preprocessor-missing", "image")
    tiny_vit(d)
    rm(d, "preprocessor_config.json")
    d = case("vit-preprocessor-missing-model-only", "image-model")
    tiny_vit(d)
    rm(d, "preprocessor_config.json")
    d = case("vit-nested-processor-config", "image")
    tiny_vit(d)
    nest_image_processor(d)
    tiny_wav2vec2(case("wav2vec2-ready", "audio"))
    d = case("wav2vec2-feature-extractor-missing", "audio")
    tiny_wav2vec2(d)
    rm(d, "preprocessor_config.json")

    # A revision the loader cannot resolve offline: installed under refs/v1 only.
    tiny_llama(case("llama-only-v1", "causal", revision="v1"))

    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)


def build_peft(out):
    """Only the adapter and its base (tests/it/multirepo.rs): the pair a bundle of several
    repositories carries together."""
    os.makedirs(out, exist_ok=True)
    cases = {
        "lora-base": {"repo": f"{ORG}/lora-base", "load": "causal", "revision": None},
        "lora-adapter": {"repo": f"{ORG}/lora-adapter", "load": "peft", "revision": None},
    }
    base_dir = os.path.join(out, "lora-base")
    tiny_llama(base_dir)
    peft_adapter(os.path.join(out, "lora-adapter"), base_dir, f"{ORG}/lora-base")
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)


def load_case(spec, cache):
    repo = spec["repo"]
    kind = spec["load"]
    if kind in ("causal", "causal+chat"):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        AutoModelForCausalLM.from_pretrained(repo)
        tok = AutoTokenizer.from_pretrained(repo)
        meaningful(tok)
        if kind == "causal+chat":
            tok.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=False)
    elif kind == "tokenizer":
        from transformers import AutoTokenizer

        meaningful(AutoTokenizer.from_pretrained(repo))
    elif kind == "remote":
        from transformers import AutoModel

        AutoModel.from_pretrained(repo, trust_remote_code=True)
    elif kind == "peft":
        from peft import AutoPeftModelForCausalLM

        AutoPeftModelForCausalLM.from_pretrained(repo)
    elif kind == "st":
        from sentence_transformers import SentenceTransformer

        SentenceTransformer(repo).encode(["hello world"])
    elif kind == "diffusers":
        from diffusers import DiffusionPipeline

        DiffusionPipeline.from_pretrained(repo)
    elif kind in ("image", "image-model"):
        import numpy as np
        import torch
        from transformers import AutoImageProcessor, AutoModelForImageClassification

        model = AutoModelForImageClassification.from_pretrained(repo)
        if kind == "image":
            processor = AutoImageProcessor.from_pretrained(repo)
            image = (np.random.default_rng(0).random((40, 48, 3)) * 255).astype("uint8")
            inputs = processor(images=image, return_tensors="pt")
        else:
            inputs = {"pixel_values": torch.zeros(1, 3, 32, 32)}
        model(**inputs)
    elif kind == "audio":
        import numpy as np
        from transformers import AutoFeatureExtractor, AutoModelForAudioClassification

        model = AutoModelForAudioClassification.from_pretrained(repo)
        extractor = AutoFeatureExtractor.from_pretrained(repo)
        sound = np.random.default_rng(0).standard_normal(1600).astype("float32")
        model(**extractor(sound, sampling_rate=16000, return_tensors="pt"))
    elif kind == "gguf":
        gguf_load(repo, cache)
    else:
        raise ValueError(f"unknown load kind {kind}")


def meaningful(tok):
    """transformers 5 builds a tokenizer with an empty vocabulary, silently, when the files of
    its class are missing: a tokenizer that maps every word to unknown (or nothing) did not load."""
    ids = tok("hello world")["input_ids"]
    words = [i for i in ids if i not in set(tok.all_special_ids) and i != tok.unk_token_id]
    if not words:
        raise ValueError(
            f"the tokenizer loaded but knows no word: 'hello world' encodes to {ids} "
            f"(vocabulary of {len(tok)})"
        )


def gguf_load(repo, cache):
    """llama.cpp's loading of a split model, with gguf-py's reader: the first split's
    `split.count`, then every `PREFIX-%05d-of-%05d.gguf` (llama_split_path), each read whole.
    The files come from the cache through huggingface_hub, as a caller would fetch them."""
    import gguf
    from huggingface_hub import hf_hub_download

    first = hf_hub_download(repo, "tiny-00001-of-00003.gguf")
    count = int(gguf.GGUFReader(first).fields["split.count"].parts[-1][0])
    for i in range(count):
        path = hf_hub_download(repo, f"tiny-{i + 1:05d}-of-{count:05d}.gguf")
        for t in gguf.GGUFReader(path).tensors:
            t.data.sum()


def no_retry_waits():
    """huggingface_hub retries a request that cannot reach the hub 5 times, waiting 1, 2, 4, 8
    and 8 s, for every file a loader probes (23 s each; minutes a model). The attempts still go
    to the network and fail as before; only the waits between them go, so the tests take
    seconds. A target without network and without HF_HUB_OFFLINE=1 does pay them."""
    import types

    import huggingface_hub.utils._http as http

    http.time = types.SimpleNamespace(sleep=lambda seconds: None)


def load(cache, cases_json):
    no_retry_waits()
    with open(cases_json) as f:
        cases = json.load(f)
    only = sys.argv[4:] or list(cases)
    asked = NetworkLog()
    logging.getLogger("huggingface_hub").addHandler(asked)
    not_found = []
    import huggingface_hub.file_download as fd

    lookup = fd._hf_hub_download_to_cache_dir

    def recording(*args, **kwargs):
        # Each file a loader asked the cache for and did not get (a missing optional file
        # included), as `ORG/NAME@REVISION/FILE`.
        try:
            return lookup(*args, **kwargs)
        except Exception:
            not_found.append(f"{kwargs.get('repo_id')}@{kwargs.get('revision') or 'main'}/{kwargs.get('filename')}")
            raise

    fd._hf_hub_download_to_cache_dir = recording
    results = {}
    for name in only:
        spec = cases[name]
        if spec["load"] == "none":
            continue
        asked.urls.clear()
        not_found.clear()
        try:
            load_case(spec, cache)
            results[name] = None
        except BaseException as e:  # noqa: BLE001 - every failure is the answer
            frames = traceback.extract_tb(e.__traceback__)
            libs = ("transformers", "peft", "sentence_transformers", "diffusers", "huggingface_hub", "gguf")
            where = " > ".join(
                f.name for f in frames if any(f"{os.sep}{lib}{os.sep}" in f.filename for lib in libs)
            )
            results[name] = (
                f"{type(e).__name__}: {e} [in {where}] "
                f"[last asked the network for: {asked.urls[-1] if asked.urls else 'nothing'}] "
                f"[asked the network for: {', '.join(dict.fromkeys(asked.urls))}] "
                f"[not in the cache: {', '.join(dict.fromkeys(not_found))}]"
            )
    json.dump(results, sys.stdout, indent=1)


class NetworkLog(logging.Handler):
    """Records which repository file each failed request of huggingface_hub asked for (its log
    line `'...' thrown while requesting HEAD https://HOST/ORG/NAME/resolve/REV/FILE`), so a
    failed load can be matched with the file airlock named: the library's own message often
    says only that it could not connect."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.urls = []

    def emit(self, record):
        m = re.search(r"thrown while requesting \w+ (\S+)", record.getMessage())
        if m:
            url = m.group(1)
            r = re.search(r"https?://[^/]+/(?:api/models/)?([^/]+/[^/]+)(?:/resolve/[^/]+/(\S+))?", url)
            self.urls.append(f"{r.group(1)}/{r.group(2) or ''}" if r else url)


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2])
    elif sys.argv[1] == "build-peft":
        build_peft(sys.argv[2])
    elif sys.argv[1] == "load":
        load(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"usage: {sys.argv[0]} build OUT | build-peft OUT | load CACHE CASES_JSON [CASE...]")
