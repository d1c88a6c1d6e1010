"""Build the tensorrt example's engine (plan file) from an ONNX model, on the GPU that will run it.

    python examples/tensorrt/build_engine.py         # writes models/mlp.onnx, then models/mlp.plan
    python examples/tensorrt/build_engine.py --min 1 --opt 8 --max 32 --fp16
    python examples/tensorrt/build_engine.py --onnx my_model.onnx --output models/my_model.plan

Without `--onnx` it first writes a small MLP with the `onnx` helper API (`x` float32 [batch, 4] ->
`y` float32 [batch, 3], y = relu(x @ W1 + b1) @ W2 + b2, hidden size 16, seeded weights). The engine gets
one optimisation profile in which dim 0 of every input (the batch) ranges over --min..--max and is tuned
for --opt; the model's other dims must be fixed.

A plan runs only with the TensorRT version and the GPU model it was built with: build it on the machine
that serves it (`pip install 'grps-py[tensorrt]'` there), and again after upgrading either.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_ONNX = HERE / "models" / "mlp.onnx"
DEFAULT_PLAN = HERE / "models" / "mlp.plan"
MLP_IN, MLP_HIDDEN, MLP_OUT = 4, 16, 3
MLP_SEED = 20240724
OPSET, IR_VERSION = 17, 8  # what TensorRT 10's ONNX parser and any onnxruntime >= 1.13 read


def mlp_weights(seed: int = MLP_SEED) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    return {
        "W1": rng.normal(0.0, 1.0 / np.sqrt(MLP_IN), (MLP_IN, MLP_HIDDEN)).astype(np.float32),
        "b1": rng.normal(0.0, 0.1, (MLP_HIDDEN,)).astype(np.float32),
        "W2": rng.normal(0.0, 1.0 / np.sqrt(MLP_HIDDEN), (MLP_HIDDEN, MLP_OUT)).astype(np.float32),
        "b2": rng.normal(0.0, 0.1, (MLP_OUT,)).astype(np.float32),
    }


def write_mlp_onnx(path: Path, seed: int = MLP_SEED) -> Path:
    """The example's MLP as an ONNX file: `x` float32 [batch, 4] -> `y` float32 [batch, 3]."""
    from onnx import TensorProto, helper, numpy_helper

    weights = mlp_weights(seed)
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h"]),
        helper.make_node("MatMul", ["h", "W2"], ["y0"]),
        helper.make_node("Add", ["y0", "b2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", MLP_IN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", MLP_OUT])],
        initializer=[numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return path


def build_engine(
    onnx_path: Path,
    plan_path: Path,
    *,
    min_batch: int = 1,
    opt_batch: int = 8,
    max_batch: int = 32,
    fp16: bool = False,
    tf32: bool = False,
    workspace_mib: int = 256,
) -> Path:
    """Parse `onnx_path`, build an engine with one profile for the batch dim, and write it to `plan_path`.

    TF32 is off unless asked for, so float32 answers match ONNX Runtime's closely; `fp16` lets TensorRT
    pick float16 kernels (TensorRT 10: TensorRT 11 builds only strongly typed networks, whose types come
    from the ONNX model)."""
    if not 1 <= min_batch <= opt_batch <= max_batch:
        raise ValueError(
            f"the batch range needs 1 <= min <= opt <= max, not {min_batch}, {opt_batch}, {max_batch}"
        )
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch: the only kind TensorRT 10 has
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_path.read_bytes()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ValueError(f"TensorRT cannot parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_mib << 20)
    if not tf32:
        config.clear_flag(trt.BuilderFlag.TF32)
    if fp16:
        flag = getattr(trt.BuilderFlag, "FP16", None)
        if flag is None:
            raise ValueError("--fp16 needs TensorRT 10; with TensorRT 11 export the ONNX model in float16")
        config.set_flag(flag)
    profile = builder.create_optimization_profile()
    dynamic = False
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        dims = list(tensor.shape)
        if -1 in dims[1:]:
            raise ValueError(f"input '{tensor.name}' {dims}: only the batch dim (dim 0) may be dynamic")
        if dims and dims[0] == -1:
            dynamic = True
            rest = dims[1:]
            profile.set_shape(tensor.name, [min_batch, *rest], [opt_batch, *rest], [max_batch, *rest])
    if dynamic:
        config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise RuntimeError(f"TensorRT could not build an engine from {onnx_path} (its messages are above)")
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    with open(plan_path, "wb") as file:
        file.write(plan)
    return plan_path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--onnx", type=Path, help="the ONNX model (default: write the example's MLP first)")
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_PLAN, help="the plan file (default %(default)s)"
    )
    parser.add_argument("--min", type=int, default=1, help="smallest batch (default %(default)s)")
    parser.add_argument("--opt", type=int, default=8, help="the batch to tune for (default %(default)s)")
    parser.add_argument("--max", type=int, default=32, help="largest batch (default %(default)s)")
    parser.add_argument("--fp16", action="store_true", help="allow float16 kernels (TensorRT 10)")
    parser.add_argument(
        "--tf32", action="store_true", help="allow TF32 for float32 matmuls (faster, less exact)"
    )
    args = parser.parse_args()
    onnx_path = args.onnx or write_mlp_onnx(DEFAULT_ONNX)
    plan = build_engine(
        onnx_path,
        args.output,
        min_batch=args.min,
        opt_batch=args.opt,
        max_batch=args.max,
        fp16=args.fp16,
        tf32=args.tf32,
    )
    print(f"wrote {plan} from {onnx_path} (batch {args.min}..{args.max}, tuned for {args.opt})")


if __name__ == "__main__":
    main()
