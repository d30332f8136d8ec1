package models

// LookupsBeforeBlocks says that what a GPT runs before its blocks is
// embedding lookups (tokens and positions), whose backward reads no
// weights: a sharding that gathers parameters for backward (ZeRO-3) need
// not gather them again.
func (g *GPT) LookupsBeforeBlocks() bool { return true }
