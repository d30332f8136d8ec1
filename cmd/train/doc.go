// Command train trains a model with memfit's memory-saving techniques and
// reports where every byte went. With no flags it trains an MLP on an
// embedded synthetic task; `train -h` lists the flags.
//
// Exit status: 0 on success, 2 for bad input (flags, data, checkpoints,
// budgets), 1 when training fails, 130 when interrupted (after saving).
package main
