package data

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// chatJSONL writes n conversations of a system message and turns
// user/assistant turns of about words words each.
func chatJSONL(n, turns, words int) string {
	var b strings.Builder
	for i := range n {
		msgs := []map[string]string{{"role": "system", "content": "You are a helpful assistant."}}
		for k := range turns {
			var u, a strings.Builder
			for w := range words {
				fmt.Fprintf(&u, "question%d ", (i*7+k*3+w)%97)
				fmt.Fprintf(&a, "answer%d, ", (i*5+k+w*11)%89)
			}
			msgs = append(msgs, map[string]string{"role": "user", "content": u.String()}, map[string]string{"role": "assistant", "content": a.String()})
		}
		line, _ := json.Marshal(map[string]any{"messages": msgs})
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// BenchmarkTokenizeChatLlama3 tokenizes conversations with Llama 3's
// vocabulary and the Llama 3.1 template, labels on the answers: the
// one-off cost of OpenSFT per conversation.
func BenchmarkTokenizeChatLlama3(b *testing.B) {
	tok := realTokenizer(b, "llama3")
	var ct *ChatTemplate
	for _, fx := range loadChatFixtures(b) {
		if fx.name == "llama3.1" {
			ct = fx.template(b)
		}
	}
	var raw map[string]json.RawMessage
	json.Unmarshal([]byte(chatJSONL(1, 4, 60)), &raw)
	rec, err := FormatChat.decode(raw)
	if err != nil {
		b.Fatal(err)
	}
	ex, err := TokenizeRecord(rec, tok, SFTOptions{Template: ct})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		TokenizeRecord(rec, tok, SFTOptions{Template: ct})
	}
	b.ReportMetric(float64(len(ex.Tokens)), "tokens/conversation")
}

// BenchmarkSFTGet reads packed windows of 1024 positions.
func BenchmarkSFTGet(b *testing.B) {
	dir := b.TempDir()
	p := writeFile(b, filepath.Join(dir, "d.jsonl"), []byte(sftRecords(2000)))
	d, err := OpenSFT(p, chatEnc, SFTOptions{Context: 1024, Pack: true, EOS: []int{259}}, CacheDir(dir))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := d.Get(i % d.Len()); err != nil {
			b.Fatal(err)
		}
	}
}
