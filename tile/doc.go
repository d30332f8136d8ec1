// Package tile runs the token-wise pieces of a model's blocks over tiles
// of the sequence (sequence tiling, as Arctic Long Sequence Training tiles
// the MLP): forward one tile of rows at a time, keeping only each piece's
// inputs and outputs, and in backward recomputing each tile and
// differentiating it at once, like checkpoint.Run per tile. What a piece
// makes inside — the norms' F32 intermediates, the projections before
// their rotation, a SwiGLU's [rows, hidden] products, the LoRA paths —
// then exists for one tile at a time, so the buffers of a block that grow
// with the sequence are the ones attention needs: its queries, keys and
// values and its output, O(T·width).
//
// A Runner is an nn.TokenRunner: models whose blocks are nn.TokenTiled
// take it (SetTokenRunner) and call it for their pieces (RunTokens) and
// around each block (RunBlock).
//
// # Exactly the untiled results
//
// A tiled pass computes what one pass over all the rows computes, bit for
// bit on the CPU (loss, every gradient, with autocast, LoRA adapters,
// packed rows), because every value is made by the same ops on the same
// operands in the same order:
//
//   - a row's forward values and its input gradients depend on that row
//     alone, and the CPU's kernels compute an element the same way
//     whatever the rows beside it;
//   - a parameter's gradient is a sum over the rows, which the tiles
//     continue rather than restart (tensor.RowSums): a weight's product
//     accumulates into one F32 sum with Beta 1, which the CPU's GEMM adds
//     K block by K block in order, so every tile starts at a multiple of
//     Align rows (the K blocks are 256 or 512 rows) and holds more than
//     the 1536 rows the GEMM would sum as one block (MinRows); a bias's
//     or a gain's reduction folds the tile's rows onto the sum so far,
//     which the CPU's column reduction does row by row; each sum is
//     rounded to the dtype of the untiled gradient once, at the end;
//   - an input shared by a piece and what follows it gets its gradient's
//     terms in the untiled order: RunBlock gives the block's pieces its
//     input as a leaf, and a piece whose input already holds a gradient
//     adds the tile's terms onto it in place.
//
// Pieces may not draw random masks (dropout is numbered by element over
// the whole tensor); the models refuse a runner where they would.
//
// # Cost
//
// Each tile's forward runs twice, once for the outputs and once in
// backward (three times under activation checkpointing, whose
// recomputation runs the tiled forward again): about a quarter more
// compute for a block dominated by its products. The memory a piece adds
// is its output and the gradients of its inputs, plus one tile's working
// set and the F32 sums of its trainable parameters.
package tile
