"""The typed run settings (normexp/config/run_config.py): built once from the composed config,
they hold exactly what the config says (every field against its key, read here by hand), and
each rule that moved into them refuses with its one-line message, both when called directly and
through the pre-flight (`check_job`) that `normexp train` runs."""

import dataclasses
from collections.abc import Mapping

import pytest
from pathlib import Path
from omegaconf import OmegaConf

from normexp.config.checks import ConfigError
from normexp.config.compose import compose_config
from normexp.config.run_config import (LogConfig, LossSpikeConfig, OptimizerConfig, RunConfig, ScheduleConfig,
                                       effective_warmup)
from normexp.launch.preflight import check_job
from normexp.model import ModelConfig
from normexp.train.config import TrainConfig

# Every field of TrainConfig and its parts, and the composed config's key it holds (the keys the
# Trainer read off the DictConfig before). A field missing here fails test_every_field_is_listed.
FIELD_KEYS = {
    "optim.lr": "lr", "optim.eps": "optim.eps", "optim.weight_decay": "optim.weight_decay",
    "optim.grad_clip": "grad_clip",
    "schedule.name": "schedule.name", "schedule.steps": "steps", "schedule.warmup": "warmup",
    "log.eval_batches": "eval_batches",
    "log.histograms": "log.histograms", "log.model_update": "log.model_update",
    "log.model_update_every": "log.model_update_every", "log.extra_signals": "log.extra_signals",
    "log.progress": "log.progress", "log.profiles_every": "log.profiles_every",
    "loss_spike.window": "loss_spike.window", "loss_spike.k": "loss_spike.k", "loss_spike.floor": "loss_spike.floor",
    "loss_spike.min_points": "loss_spike.min_points",
    "seed": "seed", "device": "device", "threads": "threads", "compile": "compile", "cuda_graph": "cuda_graph", "resume": "resume",
    "batch_size": "batch_size", "z_loss": "z_loss", "max_loss": "divergence.max_loss",
    "divergence_every_step": "divergence.every_step",
    "checkpoint_every": "checkpoint_every", "keep_checkpoints": "keep_checkpoints",
    "stall_margin": "stall_margin", "learned_margin": "outcome.learned_margin",
    "model.seq_len": "seq_len", "model.layers": "layers", "model.d_model": "d_model", "model.heads": "heads",
    "model.mlp_ratio": "mlp_ratio", "model.qk_norm": "qk_norm", "model.scale_embeddings": "scale_embeddings",
    "model.vocab_size": "tokenizer.vocab_size",
}
# fields whose value is not the key's value as it is (checked one by one below)
SPECIAL = {"optim.betas", "schedule.settings", "model.norm", "model.placement", "model.init", "model.attn_softcap",
           "model.logit_softcap", "data", "tokenizer", "composed", "log.eval_every",
           "log.log_every"}


def fields(obj, prefix=""):
    """Every leaf field of a dataclass tree by dotted name: {name: value}."""
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, Mapping):  # an option's settings: a leaf
            out.update(fields(value, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = value
    return out


OVERRIDES = [[], ["norm=rms", "placement=deepnorm", "placement.alpha=2", "layers=12", "warmup=0", "schedule=linear",
                  "grad_clip=1.0", "attn_softcap=50", "logit_softcap=0", "optim.betas=[0.8,0.95]", "log.progress=off",
                  "log.profiles_every=7", "tokenizer=bpe", "z_loss=1e-4", "loss_spike.k=3.0", "eval_every=70",
                  "log_every=7"]]


def test_every_field_is_listed():
    config = TrainConfig.from_composed(compose_config([]))
    assert set(fields(config)) == set(FIELD_KEYS) | SPECIAL


@pytest.mark.parametrize("overrides", OVERRIDES, ids=["default", "changed"])
def test_the_typed_config_holds_what_the_composed_config_says(overrides):
    cfg = compose_config(overrides)
    config = TrainConfig.from_composed(cfg)
    got = fields(config)
    for name, key in FIELD_KEYS.items():
        assert got[name] == OmegaConf.select(cfg, key), name
    assert got["optim.betas"] == tuple(cfg.optim.betas)
    # eval_every: a step count as given, or "auto" resolved (600 steps, 8 eval batches: every 30)
    assert got["log.eval_every"] == (30 if cfg.eval_every == "auto" else cfg.eval_every) == (70 if overrides else 30)
    # log_every: as given, or "auto" resolved (600 steps: every 600 // 40 = 15)
    assert got["log.log_every"] == (15 if cfg.log_every == "auto" else cfg.log_every) == (7 if overrides else 15)
    schedule = OmegaConf.to_container(cfg.schedule)
    assert got["schedule.settings"] == {k: v for k, v in schedule.items() if k != "name"}
    for group in ("norm", "placement", "init"):
        assert got[f"model.{group}"] == OmegaConf.to_container(cfg[group]) and type(got[f"model.{group}"]) is dict
    for cap in ("attn_softcap", "logit_softcap"):
        assert got[f"model.{cap}"] == (cfg[cap] or None)  # 0 and null: off
    assert dict(got["data"]) == OmegaConf.to_container(cfg.data)
    assert dict(got["tokenizer"]) == OmegaConf.to_container(cfg.tokenizer)
    assert got["composed"] is cfg
    assert config.steps == cfg.steps and config.seq_len == cfg.seq_len


def test_the_model_config_is_the_one_the_trainer_built_before():
    """ModelConfig.from_composed against the fields the trainer picked for the model before (its old
    model_config), written out by hand."""
    cfg = compose_config(OVERRIDES[1])
    expected = ModelConfig(vocab_size=300, seq_len=cfg.seq_len, layers=12, d_model=cfg.d_model, heads=cfg.heads,
                           mlp_ratio=cfg.mlp_ratio, norm={"name": "rms", "eps": cfg.norm.eps},
                           placement={"name": "deepnorm", "alpha": 2, "beta": "auto"},
                           init=OmegaConf.to_container(cfg.init), qk_norm=False, attn_softcap=50, logit_softcap=None,
                           scale_embeddings=True)
    assert ModelConfig.from_composed(cfg, 300) == expected
    assert TrainConfig.from_composed(cfg).model.with_vocab_size(300) == expected


# ------------------------------------------------------------------ the warmup rule, once

def test_effective_warmup_is_at_most_the_run():
    assert [effective_warmup(w, 10) for w in (0, 3, 10, 11, 500)] == [0, 3, 10, 10, 10]


def test_a_default_warmup_longer_than_the_run_is_shortened_with_a_warning():
    schedule = ScheduleConfig.from_composed(compose_config(["steps=40"]))  # default warmup: 100
    schedule.check(warmup_given=False)
    assert schedule.warmup == 100 and schedule.effective_warmup == 40
    assert schedule.warmup_shortened == "warmup=100 is longer than steps=40: warming up over all 40 steps"
    assert ScheduleConfig.from_composed(compose_config(["steps=400"])).warmup_shortened is None


@pytest.mark.parametrize("given", [False, True])
def test_a_warmup_longer_than_the_run_follows_one_rule_default_or_given(given, cli_env):
    """warmup=100 steps=40 given on the command line is what the default warmup at steps=40 is:
    accepted by the pre-flight, shortened to 40 with the same warning (issue 58: an explicit one
    was refused, the default stretched)."""
    overrides = ["steps=40", "warmup=100"] if given else ["steps=40"]
    cfg = compose_config(overrides)
    check_job(cfg, {"steps", "warmup"} if given else {"steps"})  # no ConfigError
    schedule = ScheduleConfig.from_composed(cfg)
    assert schedule.effective_warmup == 40
    assert schedule.warmup_shortened == "warmup=100 is longer than steps=40: warming up over all 40 steps"


def test_the_help_states_the_warmup_rule():
    from normexp.config.compose import key_meanings

    assert "longer than steps (default or given): warms up over all the steps" in key_meanings()["warmup"]


def test_the_summary_records_the_warmup_as_run():
    from normexp.runs.summary import hyperparameters

    assert hyperparameters(compose_config(["steps=40"]))["warmup"] == 40
    assert hyperparameters(compose_config(["steps=400"]))["warmup"] == 100


# ------------------------------------------------- each moved rule and its one line

# (the part, overrides, the keys given on the command line, the whole one-line message)
RULES = [
    (RunConfig, ["seed=-1"], (), "seed=-1: must be an integer from 0 to 4294967295"),
    (RunConfig, ["seed=4294967296"], (), "seed=4294967296: must be an integer from 0 to 4294967295"),
    (RunConfig, ["stall_margin=1"], (),
     "stall_margin=1: must be a number from 0 to below 1 (0.02 = 2 % below the unigram baseline)"),
    (RunConfig, ["outcome.learned_margin=-0.1"], (),
     "outcome.learned_margin=-0.1: must be a number from 0 to below 1 (0.05 = 5 % below the unigram baseline)"),
    (RunConfig, ["z_loss=-1"], (), "z_loss=-1: must be a finite number >= 0 (0 = off; PaLM uses 1e-4)"),
    (RunConfig, ["divergence.max_loss=0"], (), "divergence.max_loss=0: must be a finite number > 0"),
    (RunConfig, ["checkpoint_every=-5"], (), "checkpoint_every=-5: must be an integer >= 0 (0 = only at the end)"),
    (RunConfig, ["threads=0"], (), 'threads=0: must be "auto" or a positive integer'),
    (RunConfig, ["threads=many"], (), 'threads=many: must be "auto" or a positive integer'),
    (OptimizerConfig, ["lr=0"], (), "lr=0: must be a finite number > 0"),
    (OptimizerConfig, ["lr=inf"], (), "lr=inf: must be a finite number > 0"),
    (OptimizerConfig, ["grad_clip=-1"], (), "grad_clip=-1: must be null (off) or a finite number > 0"),
    (OptimizerConfig, ["optim.betas=[0.9,1.0]"], (),
     "optim.betas=[0.9,1.0]: must be two numbers in [0, 1), e.g. optim.betas=[0.9,0.98]"),
    (OptimizerConfig, ["optim.betas=[0.9]"], (),
     "optim.betas=[0.9]: must be two numbers in [0, 1), e.g. optim.betas=[0.9,0.98]"),
    (OptimizerConfig, ["optim.betas=0.9"], (),
     "optim.betas=0.9: must be two numbers in [0, 1), e.g. optim.betas=[0.9,0.98]"),
    (OptimizerConfig, ["optim.eps=0"], (), "optim.eps=0: must be a finite number > 0"),
    (OptimizerConfig, ["optim.weight_decay=-0.1"], (), "optim.weight_decay=-0.1: must be a finite number >= 0"),
    (ScheduleConfig, ["warmup=-1"], (), "warmup=-1: must be an integer step count >= 0 (0 = none; longer than steps: all of them)"),
    (ScheduleConfig, ["warmup=2.5"], (), "warmup=2.5: must be an integer step count >= 0 (0 = none; longer than steps: all of them)"),
    (ScheduleConfig, ["schedule.min_lr_ratio=1.5"], (),
     "schedule.min_lr_ratio=1.5: must be a number in [0, 1] (the final lr as a fraction of lr)"),
    (LogConfig, ["log.profiles_every=-1"], (), 'log.profiles_every=-1: must be "auto" or a step count >= 0 (0 = no images)'),
    (LogConfig, ["log.profiles_every=often"], (),
     'log.profiles_every=often: must be "auto" or a step count >= 0 (0 = no images)'),
    (LogConfig, ["log.progress=loud"], (), "log.progress=loud: choose auto, bar, lines or off"),
    (LossSpikeConfig, ["loss_spike.k=0"], (),
     "loss_spike.k=0: must be a finite number > 0 (robust deviations above the median; 5 = default)"),
    (LossSpikeConfig, ["loss_spike.floor=-0.5"], (),
     "loss_spike.floor=-0.5: must be a finite number >= 0 (a fraction of the median, 0.01 = 1 %)"),
    (LossSpikeConfig, ["loss_spike.window=3", "loss_spike.min_points=5"], (),
     "loss_spike.min_points=5: must be at most loss_spike.window=3 (the rule looks at most that far back)"),
]


@pytest.mark.parametrize("part, overrides, given, message", RULES, ids=lambda x: " ".join(x) if isinstance(x, list) else "")
def test_each_moved_rule_refuses_with_its_line(part, overrides, given, message):
    cfg = compose_config(overrides)
    settings = part.from_composed(cfg)
    with pytest.raises(ConfigError) as direct:
        settings.check(warmup_given="warmup" in given) if part is ScheduleConfig else settings.check()
    assert str(direct.value) == message
    with pytest.raises(ConfigError) as preflight:  # the pre-flight says the same
        check_job(cfg, set(given))
    assert str(preflight.value) == message


@pytest.mark.parametrize("part", [RunConfig, OptimizerConfig, ScheduleConfig, LogConfig, LossSpikeConfig])
def test_the_defaults_pass_every_rule(part):
    part.from_composed(compose_config([])).check()


def test_the_schedule_names_the_schedules_it_knows():
    """The check accepts the shipped options (configs/schedule/), which are the schedules the
    code has (train/schedules.py's registry)."""
    from normexp.config.compose import declared_names
    from normexp.train.schedules import SCHEDULES

    assert declared_names("schedule") == tuple(sorted(SCHEDULES))
    schedule = dataclasses.replace(ScheduleConfig.from_composed(compose_config([])), name="step")
    with pytest.raises(ConfigError) as e:
        schedule.check()
    assert str(e.value) == f"schedule=step: choose from {', '.join(sorted(SCHEDULES))}"


# ---------------------------------------------------------------- the logging cadence

@pytest.mark.parametrize("steps, log_every, every, expected", [
    (600, 50, "auto", 150),   # 50 · ceil(600 / 250) = 50 · 3
    (500, 50, "auto", 100),   # 50 · ceil(500 / 250) = 50 · 2
    (7, 1, "auto", 2),        # 1 · ceil(7 / 5)
    (600, 50, 0, 0),
    (600, 50, 25, 25),
])
def test_profile_interval_is_about_five_images_a_run_at_logging_steps(steps, log_every, every, expected):
    log = LogConfig.from_composed(compose_config([f"log_every={log_every}", f"log.profiles_every={every}"]))
    assert log.profile_interval(steps) == expected


@pytest.mark.parametrize("overrides, key, value, words", [
    (["d_model=64", "heads=5"], "heads", 5, "must divide d_model=64"),
    (["attn_softcap=-1"], "attn_softcap", -1, "a finite number > 0 (Gemma 2 uses 50)"),
    (["logit_softcap=1e308"], "logit_softcap", 1e308, "a finite number > 0 (Gemma 2 uses 30)"),
    (["norm=none", "qk_norm=true"], "qk_norm", "true", "norm=none has no norm to apply to queries and keys"),
])
def test_the_models_rules_live_on_its_config_and_the_preflight_says_the_same(overrides, key, value, words):
    """ModelConfig.check holds the model's own rules (the pre-flight calls it, torch not loaded):
    the same ConfigError from the typed object as from check_job on the composed config."""
    cfg = compose_config(overrides)
    with pytest.raises(ConfigError) as typed:
        ModelConfig.from_composed(cfg).check()
    assert (typed.value.key, typed.value.value) == (key, value) and words in str(typed.value)
    with pytest.raises(ConfigError) as preflight:
        check_job(cfg, set())
    assert str(preflight.value) == str(typed.value)
    ModelConfig.from_composed(compose_config([o for o in overrides if not o.startswith(key)])).check()  # the rest is fine


def test_the_typed_settings_read_every_key_train_yaml_declares_and_no_other():
    """The dataclasses are the schema of train.yaml's own keys: each key the file declares
    (outside its groups) is read by one field, and no field reads a key the file lacks (the
    groups' nodes are read whole: data, tokenizer, schedule, norm, placement, init)."""
    from normexp.config.compose import config_groups, top_level_keys
    from normexp.config.keys import schema_keys

    read = set(schema_keys(ModelConfig, RunConfig))
    groups = {k for k in read if k.split(".")[0] in config_groups()}
    assert groups == {"data", "tokenizer", "schedule", "schedule.name", "norm", "placement", "init"}
    assert read - groups == set(top_level_keys())


@pytest.mark.parametrize("key, value, words", [
    ("layers", "2.5", "layers=2.5: must be a positive integer"),
    ("loss_spike.window", "0", "loss_spike.window=0: must be a positive integer"),
    ("log.model_update_every", "-3", "log.model_update_every=-3: must be a positive integer"),
    ("compile", "1", "compile=1: must be true or false"),
    ("scale_embeddings", "yes", "scale_embeddings=yes: must be true or false"),
])
def test_a_count_or_a_switch_is_checked_as_its_field_declares(key, value, words):
    """check_kinds reads the kind of value from the field: a POSITIVE count, a bool switch."""
    from normexp.config.keys import check_kinds

    cfg = compose_config([f"{key}={value}"])
    with pytest.raises(ConfigError) as e:
        for cls in (ModelConfig, RunConfig):
            check_kinds(cls, cfg)
    assert str(e.value).startswith(words)
    for cls in (ModelConfig, RunConfig):
        check_kinds(cls, compose_config([]))  # the defaults pass


# ------------------------------------------------------------------ data and tokenizer, typed

def _options(group):
    return sorted(path.stem for path in (Path(__file__).resolve().parents[2] / "configs" / group).glob("*.yaml"))


@pytest.mark.parametrize("group, option", [("data", o) for o in _options("data")]
                         + [("tokenizer", o) for o in _options("tokenizer")])
def test_each_shipped_option_is_typed_by_its_class_and_read_whole(group, option):
    """Every key of each shipped data source and tokenizer (its yaml composed, presets extending
    hub included) is read by one field of its settings class, and the typed settings, as a
    mapping, are the node as written: what load_corpus took before."""
    from normexp.config.compose import declared_names
    from normexp.config.data_settings import OPTION_SETTINGS
    from normexp.config.keys import schema_keys
    from normexp.data.sources import SOURCES, TOKENIZERS

    extra = {"text": ["data.files=[a.txt]"], "jsonl": ["data.files=[a.txt]"], "hub": ["data.path=some/set"]}.get(option, [])
    cfg = compose_config([f"{group}={option}", *extra])
    settings = getattr(RunConfig.from_composed(cfg), group)
    node = OmegaConf.to_container(cfg[group], resolve=True)
    registry = SOURCES if group == "data" else TOKENIZERS
    # one name, one settings class: the sources' and tokenizers' registry and the shipped yaml name the same
    assert sorted(OPTION_SETTINGS[group]) == sorted(registry) == list(declared_names(group))
    assert type(settings) is OPTION_SETTINGS[group][node["name"]]
    assert {key.partition(".")[2] for key in schema_keys(type(settings))} == set(node)
    assert dict(settings) == node and all(getattr(settings, key) == node[key] for key in node)


def test_a_yaml_key_no_field_reads_and_a_field_without_its_key_are_refused_in_one_line():
    from normexp.config.data_settings import TextSettings
    from normexp.config.keys import read_option

    node = {"name": "text", "files": ["a.txt"], "val_files": None, "val_fraction": 0.1}
    assert dict(read_option(TextSettings, "data", node)) == node
    with pytest.raises(ConfigError) as e:
        read_option(TextSettings, "data", {**node, "shuffle": True})
    assert str(e.value) == ("data.shuffle=True: no field of TextSettings reads it; add one or drop it from "
                            "configs/data/text.yaml")
    with pytest.raises(ConfigError) as e:
        read_option(TextSettings, "data", {k: v for k, v in node.items() if k != "val_fraction"})
    assert str(e.value) == "data.val_fraction=<unset>: TextSettings reads it; declare it in configs/data/text.yaml"


def test_a_data_or_tokenizer_key_is_checked_against_the_fields_of_its_settings_class(corpus, monkeypatch):
    """The pre-flight reads a `data.X` / `tokenizer.X` key off the option's settings class
    (config/data_settings.py), not off its yaml: a key no field reads is one line naming the
    fields, with the closest; a key a field reads passes, even one no yaml declares."""
    from normexp.config.data_settings import OPTION_SETTINGS, TextSettings
    from normexp.config.keys import setting
    from normexp.launch.validate import validate

    text = ["data=text", f"data.files=[{corpus}]"]
    validate(compose_config([*text, "data.val_fraction=0.2"]))  # a field of TextSettings
    for extra, message in [
            ("+data.foo=1", "data.foo=1: data text takes files, val_files, val_fraction"),
            ("+data.val_fractoin=0.2",
             "data.val_fractoin=0.2: did you mean data.val_fraction? data text takes files, val_files, val_fraction"),
            ("+data.val_works=[hamlet]", "data.val_works=[hamlet]: data text takes files, val_files, val_fraction"),
            ("+tokenizer.vocab=3", "tokenizer.vocab=3: did you mean tokenizer.vocab_size? tokenizer byte takes vocab_size")]:
        with pytest.raises(ConfigError) as e:
            validate(compose_config([*text, extra]))
        assert str(e.value) == message

    @dataclasses.dataclass(frozen=True)
    class ShuffledText(TextSettings):  # a field the shipped yaml lacks, given on the command line
        shuffle: bool = setting("data.shuffle")

    with pytest.raises(ConfigError, match="data text takes files, val_files, val_fraction$"):
        validate(compose_config([*text, "+data.shuffle=true"]))
    monkeypatch.setitem(OPTION_SETTINGS["data"], "text", ShuffledText)
    validate(compose_config([*text, "+data.shuffle=true"]))
    with pytest.raises(ConfigError, match="data text takes files, shuffle, val_files, val_fraction$"):
        validate(compose_config([*text, "+data.foo=1"]))
