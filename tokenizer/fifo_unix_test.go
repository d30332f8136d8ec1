//go:build unix

package tokenizer

import (
	"path/filepath"
	"syscall"
	"testing"
)

// TestFIFOs checks that a named pipe given as any tokenizer file is
// refused at once instead of waiting for a writer.
func TestFIFOs(t *testing.T) {
	v, m := gpt2Text("")
	for _, tc := range []struct {
		name  string
		files map[string]string
		fifo  string // the file made a FIFO
		open  string // what is opened, in the directory
	}{
		{"tokenizer.json", nil, "tokenizer.json", "tokenizer.json"},
		{"tokenizer.json in a directory", nil, "tokenizer.json", ""},
		{"merges.txt in a directory", map[string]string{"vocab.json": v}, "merges.txt", ""},
		{"vocab.bpe", map[string]string{"encoder.json": v}, "vocab.bpe", "vocab.bpe"},
		{"encoder.json", map[string]string{"vocab.bpe": m}, "encoder.json", "encoder.json"},
		{"tokenizer_config.json", map[string]string{"tokenizer.json": hfText("", "", "")}, "tokenizer_config.json", "tokenizer.json"},
		{"chat_template.jinja", map[string]string{"tokenizer.json": hfText("", "", "")}, "chat_template.jinja", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, tc.files)
			if err := syscall.Mkfifo(filepath.Join(dir, tc.fifo), 0o644); err != nil {
				t.Skip("mkfifo:", err)
			}
			_, err := openWithin(t, filepath.Join(dir, tc.open))
			wantError(t, err, tc.fifo, "a named pipe (FIFO), not a regular file")
		})
	}
}
