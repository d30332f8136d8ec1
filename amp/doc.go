// Package amp owns mixed-precision training: the autocast policy and the
// dynamic loss scaler.
//
// Autocast is a mode of a tensor.Scope (tensor.Autocast(tensor.BF16) or
// F16): matrix products — matmul, linear, conv and the attention products —
// take 16-bit inputs and accumulate in F32; softmax, log-softmax, layer
// norm, losses, reductions and exp/log/pow compute in F32. Parameters (the
// master weights) stay F32 and receive F32 gradients; each weight is cast
// once per scope and the copy reused by every product until the scope
// closes (or the weight changes), counted as memory.Temporary. A linear
// layer's F32 bias is cast with its weight and added by the product
// itself, as the 16-bit output's dtype (as PyTorch's autocast casts it).
// An F32 operand a product takes cast (a weight) gets its gradient from
// the product in F32, never rounded to 16 bits, and added in place into
// a gradient it already has (a later micro-batch's): no pass casts a
// weight's gradient back. Layer norm's kernel writes the 16-bit copy of
// its F32 input that it saves for backward as it reads the input, and
// RMSNorm writes its result in 16 bits from its last multiply
// (tensor.Scope.MulAs): neither casts in a pass of its own.
//
// F16 has a narrow range, so small gradients underflow: GradScaler
// multiplies the loss by a large factor before backward, divides the
// gradients by it before the optimizer step, skips steps whose gradients
// overflowed and adapts the factor (PyTorch's dynamic loss scaling). BF16
// has F32's range and needs no scaling: NewGradScalerFor(BF16) returns an
// error saying so, and the training loop uses no scaler with bf16.
package amp
