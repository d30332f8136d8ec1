package data

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// collectRecords reads every record at path.
func collectRecords(t *testing.T, path string) (RecordFormat, []Record, []RecordPos) {
	t.Helper()
	r, err := OpenRecords(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	var pos []RecordPos
	if err := r.Each(func(rec Record, at RecordPos) error {
		for i := range rec.Messages {
			rec.Messages[i].Fields = nil // compared by role and content
		}
		recs = append(recs, rec)
		pos = append(pos, at)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return r.Format(), recs, pos
}

func TestRecordFormats(t *testing.T) {
	cases := []struct {
		name   string
		jsonl  string
		format RecordFormat
		want   []Record
	}{
		{"text", `{"text": "hello"}` + "\n\n" + `{"text": "world", "id": 7}`, FormatText,
			[]Record{{Format: FormatText, Text: "hello"}, {Format: FormatText, Text: "world"}}},
		{"prompt/completion", `{"prompt": "2+2=", "completion": "4"}` + "\n" + `{"completion": " no", "prompt": "yes?"}`,
			FormatPromptCompletion, []Record{
				{Format: FormatPromptCompletion, Prompt: "2+2=", Completion: "4"},
				{Format: FormatPromptCompletion, Prompt: "yes?", Completion: " no"}}},
		{"chat", `{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}` + "\n" +
			`{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "x"}]}, {"role": "assistant", "content": null, "tool_calls": []}]}`,
			FormatChat, []Record{
				{Format: FormatChat, Messages: []Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "yo"}}},
				{Format: FormatChat, Messages: []Message{{Role: "system", Content: "be brief"}, {Role: "user"}, {Role: "assistant"}}}}},
		{"alpaca", `{"instruction": "Add.", "input": "2, 2", "output": "4"}` + "\n" + `{"instruction": "Say hi.", "output": "hi"}`,
			FormatAlpaca, []Record{
				{Format: FormatAlpaca, Instruction: "Add.", Input: "2, 2", Output: "4"},
				{Format: FormatAlpaca, Instruction: "Say hi.", Output: "hi"}}},
		{"byte-order mark and CRLF", "\xef\xbb\xbf" + `{"text": "a"}` + "\r\n" + `{"text": "b"}` + "\r\n", FormatText,
			[]Record{{Format: FormatText, Text: "a"}, {Format: FormatText, Text: "b"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, filepath.Join(t.TempDir(), "d.jsonl"), []byte(c.jsonl))
			format, recs, pos := collectRecords(t, p)
			if format != c.format {
				t.Errorf("format %v, want %v", format, c.format)
			}
			if !reflect.DeepEqual(recs, c.want) {
				t.Errorf("records\n%+v\nwant\n%+v", recs, c.want)
			}
			if pos[len(pos)-1].Line < 2 || pos[0].File != p {
				t.Errorf("positions %v", pos)
			}
		})
	}
}

func TestRecordErrorsNameFileAndLine(t *testing.T) {
	chat := `{"messages": [{"role": "user", "content": "hi"}]}`
	cases := []struct {
		name, jsonl string
		want        []string
	}{
		{"not JSON", `{"text": "a"}` + "\n" + `{"text": "b"` + "\n", []string{"jsonl: ", ": line 2: invalid JSON"}},
		{"not an object", `{"text": "a"}` + "\n\n" + `["text"]`, []string{": line 3: want a JSON object"}},
		{"wrong format later", `{"text": "a"}` + "\n" + `{"prompt": "p", "completion": "c"}`, []string{`: line 2: text record has no "text"`}},
		{"number for a string", `{"prompt": "a", "completion": "b"}` + "\n" + `{"prompt": "a", "completion": 3}`, []string{`line 2: prompt/completion record: "completion" is a number, want a string`}},
		{"unknown keys first", `{"question": "a", "answer": "b"}`, []string{`line 1: record has keys {"answer", "question"}`}},
		{"messages not a list", chat + "\n" + `{"messages": "hi"}`, []string{`line 2: chat record: "messages" is a string`}},
		{"message without role", chat + "\n" + `{"messages": [{"content": "x"}]}`, []string{`line 2: chat record: message 0 has no "role"`}},
		{"message without content", chat + "\n" + `{"messages": [{"role": "user"}]}`, []string{`line 2: chat record: message 0 (user) has no "content"`}},
		{"content a number", chat + "\n" + `{"messages": [{"role": "user", "content": 5}]}`, []string{`"content" is a number, want a string or a list of parts`}},
		{"empty messages", chat + "\n" + `{"messages": []}`, []string{`line 2: chat record: "messages" is empty`}},
		{"alpaca without output", `{"instruction": "a", "output": "b"}` + "\n" + `{"instruction": "a", "input": "b"}`, []string{`line 2: alpaca record has no "output"`}},
		{"no records", "\n\n", []string{"holds no records"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, filepath.Join(t.TempDir(), "bad.jsonl"), []byte(c.jsonl))
			r, err := OpenRecords(p)
			if err == nil {
				err = r.Each(func(Record, RecordPos) error { return nil })
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range append(c.want, p) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			var de *Error
			if !errors.As(err, &de) || de.Path != p {
				t.Errorf("error %v is not a *data.Error naming %s", err, p)
			}
		})
	}
}

func TestRecordFilesDirectoryAndGlob(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "b.jsonl"), []byte(`{"text": "b"}`))
	writeFile(t, filepath.Join(dir, "a.jsonl"), []byte(`{"text": "a"}`))
	writeFile(t, filepath.Join(dir, "sub", "c.jsonl"), []byte(`{"text": "c"}`))
	writeFile(t, filepath.Join(dir, "README.md"), []byte("not data"))
	writeFile(t, filepath.Join(dir, ".hidden", "d.jsonl"), []byte(`{"text": "d"}`))
	_, recs, _ := collectRecords(t, dir)
	var got []string
	for _, r := range recs {
		got = append(got, r.Text)
	}
	if strings.Join(got, "") != "abc" {
		t.Errorf("directory gives records %q, want a, b, sub/c", got)
	}
	_, recs, _ = collectRecords(t, filepath.Join(dir, "*.jsonl"))
	if len(recs) != 2 {
		t.Errorf("glob gives %d records, want 2", len(recs))
	}
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.jsonl"), "no such file"},
		{filepath.Join(dir, "*.parquet"), "matches no files"},
		{filepath.Join(dir, "sub", "..", ".hidden", "none", "x"), "no such file"},
	} {
		if _, err := OpenRecords(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("OpenRecords(%s): %v, want %q", c.path, err, c.want)
		}
	}
	empty := t.TempDir()
	writeFile(t, filepath.Join(empty, "notes.txt"), []byte("x"))
	if _, err := OpenRecords(empty); err == nil || !strings.Contains(err.Error(), "holds no *.jsonl") {
		t.Errorf("directory without records: %v", err)
	}
}

// pyarrowSchema is the parquet schema pyarrow (and so Hugging Face's
// datasets) writes for records of these keys: every column optional,
// strings annotated STRING, lists as 3-level LISTs of "element".
func pyarrowSchema(keys ...string) *parquet.Schema {
	g := parquet.Group{}
	for _, k := range keys {
		if k == "messages" {
			g[k] = parquet.Optional(parquet.List(parquet.Optional(parquet.Group{
				"role":    parquet.Optional(parquet.String()),
				"content": parquet.Optional(parquet.String()),
			})))
		} else {
			g[k] = parquet.Optional(parquet.String())
		}
	}
	return parquet.NewSchema("schema", g)
}

// writeParquet writes rows (decoded JSON objects) under schema, rowsPerGroup
// rows to a row group.
func writeParquet(t testing.TB, path string, schema *parquet.Schema, rows []map[string]any, rowsPerGroup int) string {
	t.Helper()
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[map[string]any](&buf, schema, parquet.MaxRowsPerRowGroup(int64(rowsPerGroup)))
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return writeFile(t, path, buf.Bytes())
}

// jsonRows decodes JSON Lines into rows.
func jsonRows(t testing.TB, jsonl string) []map[string]any {
	t.Helper()
	var rows []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(jsonl), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, m)
	}
	return rows
}

func TestParquetRecordsEqualJSONL(t *testing.T) {
	cases := []struct {
		name  string
		keys  []string
		jsonl string
	}{
		{"text", []string{"text"}, `{"text": "one"}` + "\n" + `{"text": "two"}` + "\n" + `{"text": "three"}`},
		{"prompt/completion", []string{"prompt", "completion"}, `{"prompt": "a", "completion": "b"}` + "\n" + `{"prompt": "c", "completion": "d"}` + "\n" + `{"prompt": "e", "completion": "\u00e9"}`},
		{"chat", []string{"messages"}, `{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}` + "\n" +
			`{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}` + "\n" +
			`{"messages": [{"role": "user", "content": "only"}]}`},
		{"alpaca", []string{"instruction", "input", "output"}, `{"instruction": "i", "input": "x", "output": "o"}` + "\n" + `{"instruction": "j", "input": null, "output": "p"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			jp := writeFile(t, filepath.Join(dir, "d.jsonl"), []byte(c.jsonl))
			pp := writeParquet(t, filepath.Join(dir, "d.parquet"), pyarrowSchema(c.keys...), jsonRows(t, c.jsonl), 2)
			jf, jrecs, _ := collectRecords(t, jp)
			pf, precs, ppos := collectRecords(t, pp)
			if jf != pf || !reflect.DeepEqual(jrecs, precs) {
				t.Errorf("parquet gives %v %+v, JSON Lines %v %+v", pf, precs, jf, jrecs)
			}
			if ppos[len(ppos)-1].Row != len(precs) || ppos[0].Line != 0 {
				t.Errorf("parquet positions %v", ppos)
			}
		})
	}
}

// TestParquetEmptyStringIsNotNull: an empty completion (a value at full
// definition level) is "", not a missing field. (parquet-go's writer of
// maps writes "" as null, so the rows are written as levels here, as
// pyarrow writes them.)
func TestParquetEmptyStringIsNotNull(t *testing.T) {
	schema := pyarrowSchema("completion", "prompt") // columns in name order
	var buf bytes.Buffer
	w := parquet.NewWriter(&buf, schema)
	if _, err := w.WriteRows([]parquet.Row{{
		parquet.ValueOf("").Level(0, 1, 0),
		parquet.ValueOf("p").Level(0, 1, 1),
	}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, filepath.Join(t.TempDir(), "e.parquet"), buf.Bytes())
	_, recs, _ := collectRecords(t, p)
	if want := []Record{{Format: FormatPromptCompletion, Prompt: "p"}}; !reflect.DeepEqual(recs, want) {
		t.Errorf("records %+v, want %+v", recs, want)
	}
}

func TestParquetErrorsNameRow(t *testing.T) {
	dir := t.TempDir()
	rows := jsonRows(t, strings.Repeat(`{"prompt": "a", "completion": "b"}`+"\n", 5)+`{"prompt": "a", "completion": null}`)
	p := writeParquet(t, filepath.Join(dir, "bad.parquet"), pyarrowSchema("prompt", "completion"), rows, 4)
	r, err := OpenRecords(p)
	if err != nil {
		t.Fatal(err)
	}
	err = r.Each(func(Record, RecordPos) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "parquet: "+p+": row 6: prompt/completion record has no \"completion\"") {
		t.Errorf("error %v, want one naming row 6", err)
	}

	// A damaged file: an error, not a panic.
	good, _ := os.ReadFile(p)
	for _, cut := range []int{len(good) / 2, len(good) - 9, 4} {
		bad := writeFile(t, filepath.Join(dir, "cut.parquet"), good[:cut])
		_, err := OpenRecords(bad)
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("parquet cut to %d bytes: %v", cut, err)
		}
	}
}

// FuzzRecords: arbitrary bytes as a JSON Lines or parquet file give
// records or an error, never a panic, a hang or memory without bound:
// the seeds are a parquet file of each codec parquet-go decompresses (so
// that mutations reach the pages' data), chat records and a line over
// the limit of 64 KiB the fuzzing reads under.
func FuzzRecords(f *testing.F) {
	rows := jsonRows(f, sftRecords(20))
	p := writeParquet(f, filepath.Join(f.TempDir(), "seed.parquet"), pyarrowSchema("prompt", "completion"), rows, 6)
	seed, _ := os.ReadFile(p)
	f.Add(seed)
	for _, codec := range []format.CompressionCodec{format.Uncompressed, format.Snappy, format.Gzip, format.Zstd, format.Lz4Raw} {
		page := codecPage(f, codec, "hello", strings.Repeat("world ", 20))
		f.Add(pqFile{chunk: page.bytes(), codec: codec, rows: 2, rowGroups: 2}.bytes())
	}
	f.Add([]byte(`{"messages": [{"role": "user", "content": "hi"}]}` + "\n" + `{"messages": [{}]}`))
	f.Add([]byte(`{"text": "a"}` + "\n" + `{"text": "` + strings.Repeat("b", 1<<16) + `"}`))
	f.Add([]byte("PAR1\x00\x00\x00\x00PAR1"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "f.parquet")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := OpenRecordsLimit(p, 1<<16)
		if err != nil {
			return
		}
		r.Each(func(Record, RecordPos) error { return nil })
	})
}

// TestParquetFromAnotherWriter reads parquet files written by Arrow's Rust
// writer (scripts/parquet-fixtures.sh: ZSTD and Snappy, dictionaries,
// row groups of a few rows, pyarrow's layout) and compares them with the
// same records in JSON Lines.
func TestParquetFromAnotherWriter(t *testing.T) {
	for _, c := range []struct {
		name   string
		format RecordFormat
		n      int
	}{{"text", FormatText, 5}, {"prompt_completion", FormatPromptCompletion, 7}, {"chat", FormatChat, 3}, {"alpaca", FormatAlpaca, 4}} {
		t.Run(c.name, func(t *testing.T) {
			base := filepath.Join("testdata", "records", c.name)
			pf, precs, _ := collectRecords(t, base+".parquet")
			jf, jrecs, _ := collectRecords(t, base+".jsonl")
			if pf != c.format || jf != c.format || len(precs) != c.n {
				t.Fatalf("parquet: %v, %d records; JSON Lines: %v; want %v, %d", pf, len(precs), jf, c.format, c.n)
			}
			if !reflect.DeepEqual(precs, jrecs) {
				t.Errorf("parquet\n%+v\nJSON Lines\n%+v", precs, jrecs)
			}
		})
	}
}

// TestRecordsReadInBoundedMemory: walking a file holds one row group (or
// one line) at a time, not the file: the heap stays far below the file's
// size.
func TestRecordsReadInBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 24 MB")
	}
	dir := t.TempDir()
	const groups, perGroup, size = 24, 64, 16 << 10 // 24 row groups of 1 MiB
	rows := make([]map[string]any, groups*perGroup)
	var jsonl bytes.Buffer
	for i := range rows {
		text := strings.Repeat(string(rune('a'+i%26)), size-8) + strings.Repeat("0", 8)
		rows[i] = map[string]any{"text": text}
		b, _ := json.Marshal(rows[i])
		jsonl.Write(append(b, '\n'))
	}
	pq := writeParquet(t, filepath.Join(dir, "big.parquet"), pyarrowSchema("text"), rows, perGroup)
	jl := writeFile(t, filepath.Join(dir, "big.jsonl"), jsonl.Bytes())
	rows, jsonl = nil, bytes.Buffer{}
	// Garbage is collected at a tenth over what is live (the heap,
	// stacks and globals), so that the peak shows what the walk holds,
	// not how much garbage the package's globals let accumulate.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	for _, p := range []string{pq, jl} {
		runtime.GC()
		var base, ms runtime.MemStats
		runtime.ReadMemStats(&base)
		peak, n := uint64(0), 0
		r, err := OpenRecords(p)
		if err != nil {
			t.Fatal(err)
		}
		err = r.Each(func(rec Record, _ RecordPos) error {
			if n++; n%16 == 0 {
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
			if len(rec.Text) != size {
				t.Fatalf("record %d of %d bytes", n, len(rec.Text))
			}
			return nil
		})
		if err != nil || n != groups*perGroup {
			t.Fatalf("%s: %d records, %v", p, n, err)
		}
		if grown := int64(peak) - int64(base.HeapInuse); grown > 8<<20 {
			t.Errorf("%s: the heap grew by %d MiB reading a file of %d MiB", filepath.Base(p), grown>>20, groups)
		}
	}
}

// TestJSONLRecordOverTheLimit: a line longer than the limit on a record
// is refused, naming its file and line, having read no more of it than
// the limit (a line of 32 MiB under a limit of 64 KiB allocates little);
// a line of the limit exactly, its line ending aside, is read.
func TestJSONLRecordOverTheLimit(t *testing.T) {
	dir := t.TempDir()
	const limit = 64 << 10
	exact := `{"text": "` + strings.Repeat("a", limit-len(`{"text": ""}`)) + `"}`
	p := writeFile(t, filepath.Join(dir, "long.jsonl"), []byte(exact+"\r\n"+`{"text": "b"}`+"\n"+`{"text": "`+strings.Repeat("c", 32<<20)+`"}`+"\n"))
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	r, err := OpenRecordsLimit(p, limit)
	n := 0
	if err == nil {
		err = r.Each(func(Record, RecordPos) error { n++; return nil })
	}
	runtime.ReadMemStats(&m1)
	wantErr(t, err, p, "line 3: record over the limit of 64 KiB on one record")
	var tl *RecordTooLargeError
	if !errors.As(err, &tl) || tl.Limit != limit || n != 2 {
		t.Errorf("%v after %d records, want a *RecordTooLargeError after 2", err, n)
	}
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 4<<20 {
		t.Errorf("allocated %d KiB refusing a line of 32 MiB", alloc>>10)
	}
	if _, err := OpenRecordsLimit(writeFile(t, filepath.Join(dir, "end.jsonl"), []byte(exact)), limit); err != nil {
		t.Errorf("a last line of the limit without a new line: %v", err)
	}
	if _, err := OpenRecordsLimit(writeFile(t, filepath.Join(dir, "over.jsonl"), []byte(exact+" ")), limit); err == nil {
		t.Error("a last line one byte over the limit: no error")
	}
}
