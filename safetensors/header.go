package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"unicode/utf8"
)

// MaxHeader bounds the JSON header a reader accepts (100 MB, the
// reference implementation's limit), so that a corrupt length field
// cannot make it allocate gigabytes.
const MaxHeader = 100_000_000

// metadataKey is the header's entry for string metadata.
const metadataKey = "__metadata__"

// Entry is one tensor's header entry, as the JSON holds it: its dtype,
// shape and byte range [Offsets[0], Offsets[1]) in the data section.
// Marshalled as it is, it may describe an invalid tensor (tests write
// such headers on purpose); ParseHeader checks it.
type Entry struct {
	DType   DType    `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// Header is a checked header: its metadata (nil when the file has none)
// and its tensors' entries by name.
type Header struct {
	Metadata map[string]string
	Tensors  map[string]Entry
}

// Names lists the tensors in the order of their bytes in the data section
// (ties, which only empty tensors have, by name).
func (h *Header) Names() []string {
	names := make([]string, 0, len(h.Tensors))
	for n := range h.Tensors {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := h.Tensors[names[i]].Offsets, h.Tensors[names[j]].Offsets
		if a != b {
			return a[0] < b[0] || a[0] == b[0] && a[1] < b[1]
		}
		return names[i] < names[j]
	})
	return names
}

// Split cuts a whole file's bytes into its header JSON (padding included)
// and its data section, checking only the length prefix: that it fits the
// file and MaxHeader.
func Split(b []byte) (header, data []byte, err error) {
	if len(b) < 8 {
		return nil, nil, fmt.Errorf("file of %d bytes is too short for a header", len(b))
	}
	n, err := headerLen(binary.LittleEndian.Uint64(b), int64(len(b)))
	if err != nil {
		return nil, nil, err
	}
	return b[8 : 8+n], b[8+n:], nil
}

// headerLen checks a length prefix against the file's size and MaxHeader.
func headerLen(n uint64, size int64) (int64, error) {
	if n > uint64(size-8) {
		return 0, fmt.Errorf("header length %d does not fit a file of %d bytes", n, size)
	}
	if n > MaxHeader {
		return 0, fmt.Errorf("header length %d is over the limit of %d bytes", n, MaxHeader)
	}
	return int64(n), nil
}

// Frame returns header JSON as a file begins: the 8-byte little-endian
// length, then the JSON padded with spaces to a multiple of 8 bytes (so
// that the data section starts aligned, as the format recommends). It
// does not look at the JSON.
func Frame(headerJSON []byte) []byte {
	pad := (8 - len(headerJSON)%8) % 8
	out := make([]byte, 8, 8+len(headerJSON)+pad)
	binary.LittleEndian.PutUint64(out, uint64(len(headerJSON)+pad))
	out = append(out, headerJSON...)
	return append(out, bytes.Repeat([]byte{' '}, pad)...)
}

// EncodeHeader returns the framed header (see Frame) of tensors and
// metadata (omitted when empty), keys in sorted order. It checks nothing:
// use ParseHeader to know whether the result is valid.
func EncodeHeader(tensors map[string]Entry, meta map[string]string) ([]byte, error) {
	h := make(map[string]any, len(tensors)+1)
	if len(meta) > 0 {
		h[metadataKey] = meta
	}
	for n, e := range tensors {
		if e.Shape == nil {
			e.Shape = []int{} // a scalar: [], not null
		}
		h[n] = e
	}
	hj, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	return Frame(hj), nil
}

// ParseHeader parses header JSON and checks it against a data section of
// dataLen bytes as the reference implementation does, before anything is
// allocated for the tensors: UTF-8, one JSON object with no key twice,
// string metadata, for each tensor a known dtype, a shape whose element
// and byte counts do not overflow, a byte range in order whose length is
// the shape's; and the ranges must cover the data section exactly (no
// overlap, no hole, no trailing byte).
func ParseHeader(headerJSON []byte, dataLen int64) (*Header, error) {
	if !utf8.Valid(headerJSON) {
		return nil, errors.New("header is not UTF-8")
	}
	h := &Header{Tensors: map[string]Entry{}}
	dec := json.NewDecoder(bytes.NewReader(headerJSON))
	err := eachKey(dec, func(name string) error {
		if name == metadataKey {
			if err := dec.Decode(&h.Metadata); err != nil {
				return fmt.Errorf("metadata: %v (want an object of strings)", jsonErr(err))
			}
			return nil
		}
		e, err := decodeEntry(dec)
		if err != nil {
			return fmt.Errorf("tensor %s: %v", name, err)
		}
		if err := e.check(dataLen); err != nil {
			return fmt.Errorf("tensor %s: %v", name, err)
		}
		h.Tensors[name] = e
		return nil
	})
	if err != nil {
		return nil, err
	}
	// After the object only the padding may follow.
	if rest := headerJSON[dec.InputOffset():]; len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
		return nil, fmt.Errorf("header is not JSON: %d bytes after the object", len(rest))
	}
	if err := checkTiling(h, dataLen); err != nil {
		return nil, err
	}
	return h, nil
}

// Decode checks a whole file's bytes (see ParseHeader) and returns its
// header and data section, which aliases b.
func Decode(b []byte) (*Header, []byte, error) {
	hj, data, err := Split(b)
	if err != nil {
		return nil, nil, err
	}
	h, err := ParseHeader(hj, int64(len(data)))
	if err != nil {
		return nil, nil, err
	}
	return h, data, nil
}

// eachKey reads a JSON object from dec, calling f with each key while dec
// stands before its value (f must consume it). A key seen twice is an
// error: JSON decoders disagree on which one wins, so a header holding one
// means different tensors to different readers.
func eachKey(dec *json.Decoder, f func(key string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("header is not JSON: %v", jsonErr(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("header is not a JSON object (it starts with %v)", tok)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("header is not JSON: %v", jsonErr(err))
		}
		key := tok.(string) // inside an object, Token returns keys as strings
		if seen[key] {
			return fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		if err := f(key); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return fmt.Errorf("header is not JSON: %v", jsonErr(err))
	}
	return nil
}

// decodeEntry reads one tensor's entry, each of its three keys exactly
// once and spelt exactly (encoding/json would match "DType" to "dtype").
// Other keys are skipped, as the reference implementation skips them.
func decodeEntry(dec *json.Decoder) (Entry, error) {
	var (
		e                   Entry
		dtype               *string
		shape, offs         []int64
		hasShape, hasOffset bool
	)
	tok, err := dec.Token()
	if err != nil {
		return e, fmt.Errorf("not JSON: %v", jsonErr(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return e, fmt.Errorf("entry is not an object (it starts with %v)", tok)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return e, fmt.Errorf("not JSON: %v", jsonErr(err))
		}
		key := tok.(string)
		if seen[key] {
			return e, fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		var derr error
		switch key {
		case "dtype":
			derr = dec.Decode(&dtype)
		case "shape":
			derr, hasShape = dec.Decode(&shape), true
		case "data_offsets":
			derr, hasOffset = dec.Decode(&offs), true
		default:
			var skip json.RawMessage
			derr = dec.Decode(&skip)
		}
		if derr != nil {
			return e, fmt.Errorf("%s: %v", key, jsonErr(derr))
		}
	}
	if _, err := dec.Token(); err != nil {
		return e, fmt.Errorf("not JSON: %v", jsonErr(err))
	}
	switch {
	case dtype == nil:
		return e, errors.New("no dtype")
	case !hasShape || shape == nil:
		return e, errors.New("no shape")
	case !hasOffset || len(offs) != 2:
		return e, fmt.Errorf("data_offsets %v: want [begin, end]", offs)
	}
	e.DType = DType(*dtype)
	e.Shape = make([]int, len(shape))
	for i, d := range shape {
		if d < 0 || int64(int(d)) != d {
			return e, fmt.Errorf("shape %v: dimension %d", shape, d)
		}
		e.Shape[i] = int(d)
	}
	e.Offsets = [2]int64{offs[0], offs[1]}
	return e, nil
}

// check checks one entry against a data section of dataLen bytes.
func (e Entry) check(dataLen int64) error {
	if !e.DType.Known() {
		return fmt.Errorf("unknown dtype %q", string(e.DType))
	}
	size, err := ByteSize(e.DType, e.Shape)
	if err != nil {
		return err
	}
	o := e.Offsets
	if o[0] < 0 || o[1] < o[0] || o[1] > dataLen || o[1]-o[0] != size {
		return fmt.Errorf("shape %v of %s (%d bytes) and byte range %v do not fit %d data bytes", e.Shape, e.DType, size, o, dataLen)
	}
	return nil
}

// checkTiling checks that the tensors' byte ranges cover [0, dataLen)
// exactly once. Overlapping ranges would let one corrupt write show up in
// two tensors, and a hole or trailing bytes are bytes no tensor accounts
// for; either way the header does not describe the data.
func checkTiling(h *Header, dataLen int64) error {
	var end int64
	prev := ""
	for _, n := range h.Names() {
		o := h.Tensors[n].Offsets
		switch {
		case o[0] < end:
			return fmt.Errorf("tensors %s %v and %s %v overlap", prev, h.Tensors[prev].Offsets, n, o)
		case o[0] > end && prev == "":
			return fmt.Errorf("tensor %s %v is the first; data bytes [0 %d] before it belong to no tensor", n, o, o[0])
		case o[0] > end:
			return fmt.Errorf("tensors %s %v and %s %v leave data bytes [%d %d] between them that belong to no tensor", prev, h.Tensors[prev].Offsets, n, o, end, o[0])
		}
		if o[1] > end || prev == "" {
			end, prev = o[1], n
		}
	}
	if end != dataLen {
		if prev == "" {
			return fmt.Errorf("%d data bytes but no tensors", dataLen)
		}
		return fmt.Errorf("tensor %s %v is the last, but the data section holds %d bytes (%d belong to no tensor)", prev, h.Tensors[prev].Offsets, dataLen, dataLen-end)
	}
	return nil
}

// jsonErr turns the decoder's io.EOF and io.ErrUnexpectedEOF into words.
func jsonErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("unexpected end of JSON input")
	}
	return err
}
