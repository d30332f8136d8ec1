// Package freeze owns layer freezing: parameters chosen by dotted-path
// patterns stop requiring gradients, lose their gradient buffers and their
// optimizer state, and — because nothing below them then needs a gradient —
// backward stops at the lowest trainable layer. A Schedule unfreezes groups
// at given steps (gradual unfreezing), with their own learning rate.
//
// Patterns are globs over dotted paths: '*' matches any run of characters
// (dots included), '?' one character other than a dot, and '[a-b]' any
// decimal number from a to b, so "blocks.[0-2].*" names the first three
// blocks of a GPT and "embed.*" its embeddings.
package freeze
