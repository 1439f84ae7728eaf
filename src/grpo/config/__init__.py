"""Typed run configuration: its schema (`schema.py`: a dataclass per section, each key's meaning and check
beside it, declared with `keys.py`'s knob) and its loader (`loader.py`: YAML files, presets and dotted CLI
overrides, checked key by key). Import both from here: `from grpo.config import RunConfig, load_config`.
`doc.py` (`grpo config show`, the configuration reference) is imported on its own, where it is shown.
"""

from grpo.config.loader import (
                                PRESET_DIR,
                                apply_override,
                                config_yaml,
                                from_dict,
                                load_config,
                                read_yaml_config,
                                resolve_config_path,
                                split_overrides,
                                to_dict,
                                yaml_error_line,
)
from grpo.config.schema import (
                                ActorConfig,
                                AlgoConfig,
                                ArithConfig,
                                BreakerConfig,
                                CheckpointConfig,
                                EvalConfig,
                                FaultsConfig,
                                GuardConfig,
                                LoggingConfig,
                                LoraConfig,
                                MemoryConfig,
                                ModelConfig,
                                RolloutConfig,
                                RunConfig,
                                ServerConfig,
                                TaskConfig,
                                TestingConfig,
                                TinyModelConfig,
                                TrainConfig,
                                validate,
)

__all__ = [
    "PRESET_DIR", "ActorConfig", "AlgoConfig", "ArithConfig", "BreakerConfig", "CheckpointConfig", "EvalConfig",
    "FaultsConfig", "GuardConfig", "LoggingConfig", "LoraConfig", "MemoryConfig", "ModelConfig", "RolloutConfig",
    "RunConfig", "ServerConfig", "TaskConfig", "TestingConfig", "TinyModelConfig", "TrainConfig", "apply_override",
    "config_yaml", "from_dict", "load_config", "read_yaml_config", "resolve_config_path", "split_overrides",
    "to_dict", "validate", "yaml_error_line",
]
