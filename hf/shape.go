package hf

// Shape is a checkpoint's model shape in the terms a trainer names a
// model by, whatever its architecture: what ReadShape returns.
type Shape struct {
	Layers, Heads, KVHeads, Dim, Hidden int
	// Positions is the longest sequence; Learned says it is a table of
	// learned position embeddings of exactly that many rows (GPT-2), not
	// only a bound (rotary positions: Llama).
	Positions int
	Learned   bool
	Vocab     int
	// Params is the model's parameter count, computed from the config
	// alone (exact, bounded: no overflow), so that a model too large for
	// memory is refused before anything is built.
	Params int64
}

// ReadShape reads the shape of the checkpoint's model from its
// config.json (or infers it from the tensors, and says so in note), for
// any architecture Architecture names.
func ReadShape(c *Checkpoint) (s Shape, note string, err error) {
	arch, err := Architecture(c)
	if err != nil {
		return s, "", err
	}
	switch arch {
	case "gpt2":
		h, n, err := ReadGPT2Config(c)
		if err != nil {
			return s, "", err
		}
		return Shape{Layers: h.Layers, Heads: h.Heads, KVHeads: 0, Dim: h.Dim, Positions: h.Positions, Learned: true,
			Vocab: h.Vocab, Params: h.Params()}, n, nil
	}
	h, n, err := ReadDecoderConfig(c)
	if err != nil {
		return s, "", err
	}
	return Shape{Layers: h.Layers, Heads: h.Heads, KVHeads: h.KVHeads, Dim: h.Dim, Hidden: h.Hidden, Positions: h.Positions,
		Vocab: h.Vocab, Params: h.Params()}, n, nil
}
