package tokenizer

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normOp is one normalizer of a tokenizer.json, applied to each stretch of
// text between the added tokens matched on the raw text, in the file's
// order.
type normOp struct {
	kind normKind
	form norm.Form // for normForm
}

type normKind uint8

const (
	normForm    normKind = iota // a Unicode normalization form: NFC, NFD, NFKC, NFKD
	normReplace                 // Replace " " with "▁"
	normPrepend                 // Prepend "▁" to a stretch that is not empty
)

// forms maps the normalizer types to their forms.
var forms = map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}

// normalize applies the normalizers to a piece of a stretch of text; first
// says the piece starts the stretch, where Prepend puts its "▁".
//
// x/text's forms follow Unicode's Stream-Safe Text Format: after 30
// combining marks in a row they insert U+034F, which Hugging Face's
// normalizers do not; no real text has such runs.
func (t *BPE) normalize(s string, first bool) string {
	for _, op := range t.norms {
		switch op.kind {
		case normForm:
			s = op.form.String(s)
		case normReplace:
			s = strings.ReplaceAll(s, " ", "▁")
		case normPrepend:
			if first && s != "" {
				s = "▁" + s
			}
		}
	}
	return s
}

// normBoundary returns the length of the longest prefix of s that the
// tokenizer's form (the loader allows one) can normalize on its own:
// normalizing it and the rest apart gives the normalization of the whole,
// whatever follows. A stream is normalized piece by piece up to there.
// Replace and Prepend act on " " and "▁", which no form composes or
// decomposes.
func (t *BPE) normBoundary(s string) int {
	for _, op := range t.norms {
		if op.kind == normForm {
			return max(0, op.form.LastBoundary([]byte(s)))
		}
	}
	return len(s)
}
