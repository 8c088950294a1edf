"""One custom-domain ONNX node per plugin op (the contract an ONNX Runtime / TensorRT plugin implements).

The node takes every tensor input positionally (optional ones that are absent are left out and flagged by a
`has_*` attribute) and the op's scalars as attributes. A schema is built per call because the exporter needs
one to record a node; nothing is registered globally.
"""

from __future__ import annotations

from dayzero.plugins.registry import ONNX_DOMAIN

_ATTRIBUTE_KINDS = {float: "FLOAT", int: "INT", bool: "INT", str: "STRING"}


def dayzero_node(name: str, inputs: list, outputs_like: list, **attributes):
    """Emit `dayzero::<name>(*inputs)` with len(outputs_like) outputs typed like the given values (None: untyped)."""
    import onnxscript
    from onnx.defs import OpSchema

    param = OpSchema.FormalParameter
    schema = OpSchema(
        name, ONNX_DOMAIN, 1,
        inputs=[param("inputs", "T", param_option=OpSchema.FormalParameterOption.Variadic, is_homogeneous=False)],
        outputs=[param(f"output{i}", "T") for i in range(len(outputs_like))],
        type_constraints=[("T", [f"tensor({t})" for t in ("float", "float16", "bfloat16", "int32", "int64")], "")],
        attributes=[OpSchema.Attribute(k, getattr(OpSchema.AttrType, _ATTRIBUTE_KINDS[type(v)]), "")
                    for k, v in attributes.items()],
    )
    values = {k: int(v) if isinstance(v, bool) else v for k, v in attributes.items()}
    op = onnxscript.values.Op(onnxscript.values.Opset(ONNX_DOMAIN, 1), name, schema)
    outputs = op(*inputs, **values)
    outputs = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
    for value, like in zip(outputs, outputs_like):
        if like is not None:
            value.dtype, value.shape = like.dtype, like.shape
    return outputs if len(outputs) > 1 else outputs[0]
