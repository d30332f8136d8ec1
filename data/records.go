package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/memfit/memfit/internal/regularfile"
)

// RecordFormat is the kind of a fine-tuning record, found from the first
// record of a dataset.
type RecordFormat int

const (
	// FormatText is {"text": ...}: a document, every token trained.
	FormatText RecordFormat = iota + 1
	// FormatPromptCompletion is {"prompt": ..., "completion": ...}.
	FormatPromptCompletion
	// FormatChat is {"messages": [{"role": ..., "content": ...}, ...]},
	// the chat format of transformers and the OpenAI API.
	FormatChat
	// FormatAlpaca is Alpaca's {"instruction": ..., "input": ...,
	// "output": ...}; "input" may be missing or empty.
	FormatAlpaca
)

func (f RecordFormat) String() string {
	switch f {
	case FormatText:
		return "text"
	case FormatPromptCompletion:
		return "prompt/completion"
	case FormatChat:
		return "chat"
	case FormatAlpaca:
		return "alpaca"
	}
	return fmt.Sprintf("RecordFormat(%d)", int(f))
}

// Record is one fine-tuning record; the fields of its Format are set.
type Record struct {
	Format RecordFormat

	Text string // FormatText

	Prompt, Completion string // FormatPromptCompletion

	Messages []Message // FormatChat

	Instruction, Input, Output string // FormatAlpaca
}

// Message is one turn of a conversation.
type Message struct {
	Role string
	// Content is the message's content when it is a string (the usual
	// case); a list of parts or null leaves it empty, and the template
	// reads them from Fields.
	Content string
	// Fields is the whole message object as JSON, its keys in their
	// order: what a chat template sees, tool calls and names included.
	// Nil means {"role": Role, "content": Content}.
	Fields json.RawMessage
}

// RecordPos says where a record is: its file and its line (JSON Lines) or
// row (parquet), both counted from 1.
type RecordPos struct {
	File string
	Line int // 0 for parquet
	Row  int // 0 for JSON Lines
}

func (p RecordPos) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s: line %d", p.File, p.Line)
	}
	return fmt.Sprintf("%s: row %d", p.File, p.Row)
}

// posErr is an Error about the record at p.
func posErr(p RecordPos, err error) *Error {
	format, where := "jsonl", fmt.Sprintf("line %d", p.Line)
	if p.Line == 0 {
		format, where = "parquet", fmt.Sprintf("row %d", p.Row)
	}
	return &Error{Format: format, Path: p.File, Record: -1, Err: fmt.Errorf("%s: %w", where, err)}
}

// Records is a set of record files read in order: JSON Lines (one JSON
// object per line; blank lines are skipped) and parquet (read one row
// group at a time). Nothing is read whole: a JSON Lines file is read a
// line at a time, a parquet file a row group at a time.
type Records struct {
	files    []string
	format   RecordFormat
	maxBytes int64
}

// DefaultMaxRecordBytes is the most bytes one record may take unless
// told otherwise (OpenRecordsLimit, SFTOptions.MaxRecordBytes): a JSON
// Lines line, or a parquet row as the JSON object it becomes. 16 MiB is
// four times the text of a million-token context (about 4 bytes a
// token) and sixteen times a novel, so no record a model could train on
// whole comes near it; decoding and tokenizing a record takes about 16
// times its size (some 250 MB at the limit, with Llama 3's vocabulary),
// which keeps a run that meets such a record within 1 GiB. A line of
// gigabytes (a file that is not JSON Lines, or one record holding a
// corpus) is refused at once, having read no more than the limit.
const DefaultMaxRecordBytes = 16 << 20

// RecordTooLargeError is the error of a record over the limit on one
// record's bytes.
type RecordTooLargeError struct {
	Limit int64 // bytes
}

func (e *RecordTooLargeError) Error() string {
	return "record over the limit of " + sizeString(e.Limit) + " on one record"
}

// sizeString writes n bytes as a size, in the largest binary unit that
// divides it.
func sizeString(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// OpenRecords finds the record files at path — a file, a directory (its
// *.jsonl, *.json and *.parquet files, in subdirectories too, in name
// order) or a glob of either — and reads the first record to find the
// format. A file is parquet when it starts with parquet's magic bytes,
// else JSON Lines. A record may take DefaultMaxRecordBytes.
func OpenRecords(path string) (*Records, error) {
	return OpenRecordsLimit(path, DefaultMaxRecordBytes)
}

// OpenRecordsLimit is OpenRecords with a limit on the bytes of one
// record (a JSON Lines line without its line ending, or a parquet row as
// JSON; 0 is DefaultMaxRecordBytes): a longer one is an error naming its
// file and line or row, wrapping a *RecordTooLargeError, found having
// read no more of it than the limit.
func OpenRecordsLimit(path string, maxBytes int64) (*Records, error) {
	if maxBytes < 0 {
		return nil, fileErr("records", path, "limit of %d bytes on a record", maxBytes)
	}
	if maxBytes == 0 {
		maxBytes = DefaultMaxRecordBytes
	}
	files, err := recordFiles(path)
	if err != nil {
		return nil, err
	}
	r := &Records{files: files, maxBytes: maxBytes}
	var first error
	err = r.each(func(rec map[string]json.RawMessage, at RecordPos) error {
		f, ferr := detectFormat(rec)
		if ferr != nil {
			first = posErr(at, ferr)
		}
		r.format = f
		return errStop
	})
	switch {
	case first != nil:
		return nil, first
	case errors.Is(err, errStop):
	case err != nil:
		return nil, err
	default:
		return nil, fileErr("records", path, "holds no records")
	}
	return r, nil
}

// Format returns the format of the records, found from the first.
func (r *Records) Format() RecordFormat { return r.format }

// Files returns the record files in the order they are read.
func (r *Records) Files() []string { return slices.Clone(r.files) }

// Each calls fn with every record in order. A record that does not fit
// the format is an error naming its file and line or row; so is an error
// fn returns, which stops the walk.
func (r *Records) Each(fn func(rec Record, at RecordPos) error) error {
	return r.each(func(raw map[string]json.RawMessage, at RecordPos) error {
		rec, err := r.format.decode(raw)
		if err == nil {
			err = fn(rec, at)
		}
		if err != nil {
			var de *Error
			if errors.As(err, &de) {
				return err
			}
			return posErr(at, err)
		}
		return nil
	})
}

var errStop = errors.New("stop")

// each calls fn with every record as a JSON object, file by file.
func (r *Records) each(fn func(rec map[string]json.RawMessage, at RecordPos) error) error {
	for _, p := range r.files {
		f, _, err := regularfile.Open(p)
		if err != nil {
			return openErr("records", p, err)
		}
		if isParquet(f) {
			err = eachParquet(f, p, r.maxBytes, fn)
		} else {
			err = eachJSONL(f, p, r.maxBytes, fn)
		}
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// recordFiles lists the files at path (a file, a directory or a glob).
func recordFiles(path string) ([]string, error) {
	if path == "" {
		return nil, fileErr("records", "", "no path")
	}
	var roots []string
	if _, err := os.Stat(path); err == nil {
		roots = []string{path}
	} else if strings.ContainsAny(path, "*?[") {
		m, gerr := filepath.Glob(path)
		if gerr != nil {
			return nil, fileErr("records", path, "bad pattern: %v", gerr)
		}
		if len(m) == 0 {
			return nil, fileErr("records", path, "matches no files")
		}
		roots = m
	} else {
		return nil, openErr("records", path, err)
	}
	var files []string
	for _, root := range roots {
		st, err := os.Stat(root)
		if err != nil {
			return nil, openErr("records", root, err)
		}
		if !st.IsDir() {
			if !st.Mode().IsRegular() {
				return nil, openErr("records", root, &regularfile.NotRegularError{Mode: st.Mode()})
			}
			files = append(files, root)
			continue
		}
		var found []string
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			name := d.Name()
			if d.IsDir() {
				if p != root && strings.HasPrefix(name, ".") {
					return filepath.SkipDir
				}
				return nil
			}
			switch strings.ToLower(filepath.Ext(name)) {
			case ".jsonl", ".json", ".parquet":
				if d.Type().IsRegular() && !strings.HasPrefix(name, ".") {
					found = append(found, p)
				}
			}
			return nil
		})
		if err != nil {
			return nil, openErr("records", root, err)
		}
		if len(found) == 0 {
			return nil, fileErr("records", root, "directory holds no *.jsonl, *.json or *.parquet files")
		}
		slices.Sort(found)
		files = append(files, found...)
	}
	return files, nil
}

// eachJSONL reads one JSON object per line; memory is bounded by the
// longest line, and a line of more than maxBytes (without its line
// ending) is refused as soon as that many bytes of it are read.
func eachJSONL(r io.Reader, path string, maxBytes int64, fn func(map[string]json.RawMessage, RecordPos) error) error {
	br := bufio.NewReaderSize(r, 1<<16)
	var buf []byte
	for line := 1; ; line++ {
		b, err := readLine(br, buf[:0], maxBytes)
		buf = b
		if err == errLineTooLong {
			return posErr(RecordPos{File: path, Line: line}, &RecordTooLargeError{Limit: maxBytes})
		}
		if len(b) > 0 {
			if line == 1 {
				b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) // a byte-order mark
			}
			if t := bytes.TrimSpace(b); len(t) > 0 {
				at := RecordPos{File: path, Line: line}
				var rec map[string]json.RawMessage
				if t[0] == '[' && line == 1 {
					return posErr(at, errors.New("a JSON array: want JSON Lines, one JSON object per line"))
				}
				if t[0] != '{' {
					return posErr(at, fmt.Errorf("want a JSON object, found %q", clip(t)))
				}
				if jerr := json.Unmarshal(t, &rec); jerr != nil {
					return posErr(at, fmt.Errorf("invalid JSON: %v", jerr))
				}
				if ferr := fn(rec, at); ferr != nil {
					return ferr
				}
			}
		}
		if cap(buf) > 1<<20 {
			buf = nil // a long line's buffer is not kept for the short ones
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &Error{Format: "jsonl", Path: path, Record: -1, Err: fmt.Errorf("line %d: %w", line, err)}
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine appends the next line of br to buf, its new line included,
// and returns it with io.EOF at the end of the input. A line of more
// than max bytes, not counting its line ending ("\n" or "\r\n"), is
// errLineTooLong, read no further than max+2 bytes.
func readLine(br *bufio.Reader, buf []byte, max int64) ([]byte, error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if int64(len(buf))+int64(len(chunk)) > max+2 {
			return buf, errLineTooLong
		}
		buf = append(buf, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		n := len(buf)
		if n > 0 && buf[n-1] == '\n' {
			n--
			if n > 0 && buf[n-1] == '\r' {
				n--
			}
		}
		if int64(n) > max {
			return buf, errLineTooLong
		}
		return buf, err
	}
}

// clip shortens b for an error message.
func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// detectFormat finds a record's format from its keys.
func detectFormat(rec map[string]json.RawMessage) (RecordFormat, error) {
	has := func(k string) bool {
		v, ok := rec[k]
		return ok && string(v) != "null"
	}
	switch {
	case has("messages"):
		return FormatChat, nil
	case has("prompt") && has("completion"):
		return FormatPromptCompletion, nil
	case has("instruction") && has("output"):
		return FormatAlpaca, nil
	case has("text"):
		return FormatText, nil
	}
	keys := make([]string, 0, len(rec))
	for k := range rec {
		keys = append(keys, fmt.Sprintf("%q", k))
	}
	slices.Sort(keys)
	return 0, fmt.Errorf(`record has keys {%s}: want "text", "prompt" and "completion", "messages", or "instruction" and "output"`, strings.Join(keys, ", "))
}

// decode reads a record of format f.
func (f RecordFormat) decode(rec map[string]json.RawMessage) (Record, error) {
	out := Record{Format: f}
	str := func(key string, optional bool) (string, error) {
		v, ok := rec[key]
		if !ok || string(v) == "null" {
			if optional {
				return "", nil
			}
			return "", fmt.Errorf("%s record has no %q", f, key)
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", fmt.Errorf("%s record: %q is %s, want a string", f, key, jsonKind(v))
		}
		return s, nil
	}
	var err error
	switch f {
	case FormatText:
		out.Text, err = str("text", false)
	case FormatPromptCompletion:
		if out.Prompt, err = str("prompt", false); err == nil {
			out.Completion, err = str("completion", false)
		}
	case FormatAlpaca:
		if out.Instruction, err = str("instruction", false); err == nil {
			if out.Input, err = str("input", true); err == nil {
				out.Output, err = str("output", false)
			}
		}
	case FormatChat:
		out.Messages, err = decodeMessages(rec["messages"])
	default:
		err = fmt.Errorf("unknown record format %d", int(f))
	}
	return out, err
}

func decodeMessages(raw json.RawMessage) ([]Message, error) {
	if raw == nil || string(raw) == "null" {
		return nil, errors.New(`chat record has no "messages"`)
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf(`chat record: "messages" is %s, want a list of messages`, jsonKind(raw))
	}
	if len(list) == 0 {
		return nil, errors.New(`chat record: "messages" is empty`)
	}
	msgs := make([]Message, len(list))
	for i, m := range list {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(m, &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("chat record: message %d is %s, want an object with \"role\" and \"content\"", i, jsonKind(m))
		}
		var role string
		if err := json.Unmarshal(obj["role"], &role); err != nil || role == "" {
			return nil, fmt.Errorf("chat record: message %d has no \"role\" string", i)
		}
		c, ok := obj["content"]
		if !ok {
			return nil, fmt.Errorf("chat record: message %d (%s) has no \"content\"", i, role)
		}
		msgs[i] = Message{Role: role, Fields: m}
		if len(c) > 0 && c[0] == '"' {
			if err := json.Unmarshal(c, &msgs[i].Content); err != nil {
				return nil, fmt.Errorf("chat record: message %d: %v", i, err)
			}
		} else if k := jsonKind(c); k != "a list" && k != "null" {
			return nil, fmt.Errorf("chat record: message %d (%s): \"content\" is %s, want a string or a list of parts", i, role, k)
		}
	}
	return msgs, nil
}

// jsonKind names the kind of a JSON value for error messages.
func jsonKind(v json.RawMessage) string {
	t := bytes.TrimSpace(v)
	if len(t) == 0 {
		return "missing"
	}
	switch t[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "a list"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
