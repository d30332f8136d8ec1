package data

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/parquet-go/parquet-go"
)

// isParquet reports whether f starts with parquet's magic bytes.
func isParquet(f io.ReaderAt) bool {
	var m [4]byte
	n, _ := f.ReadAt(m[:], 0)
	return n == 4 && string(m[:]) == "PAR1"
}

// parquetBatch is how many rows are decoded at once.
const parquetBatch = 64

// eachParquet reads a parquet file one row group at a time (parquet-go
// reads a column chunk's pages as the rows need them, through ReadAt), and
// hands fn each row as a JSON object, as a JSON Lines record would be:
// lists are arrays, structs objects, nulls null. Rows are counted from 1.
func eachParquet(f *os.File, path string, fn func(map[string]json.RawMessage, RecordPos) error) (err error) {
	fail := func(format string, args ...any) error {
		return &Error{Format: "parquet", Path: path, Record: -1, Err: fmt.Errorf(format, args...)}
	}
	// parquet-go panics on some malformed files (a LIST that is not a
	// repeated group of one element, a row that does not fit the
	// schema); a user's file is no reason to crash.
	defer func() {
		if p := recover(); p != nil {
			err = fail("%v", p)
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return openErr("parquet", path, err)
	}
	// parquet-go allocates the footer's length as the file states it; a
	// damaged length would ask for up to 4 GiB.
	var tail [8]byte
	if st.Size() < 12 {
		return fail("%d bytes: too short for a parquet file", st.Size())
	}
	if _, err := f.ReadAt(tail[:], st.Size()-8); err != nil {
		return fail("%v", err)
	}
	if n := int64(binary.LittleEndian.Uint32(tail[:])); n > st.Size()-12 {
		return fail("footer of %d bytes in a file of %d: the file is damaged or truncated", n, st.Size())
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return fail("%v", err)
	}
	schema := pf.Schema()
	rows := make([]parquet.Row, parquetBatch)
	n := 0
	meta := pf.Metadata()
	for g, rg := range pf.RowGroups() {
		// Column chunks outside the file are damage that parquet-go
		// would find only after allocating what the page headers claim.
		for c, col := range meta.RowGroups[g].Columns {
			m := col.MetaData
			start := m.DataPageOffset
			if m.DictionaryPageOffset > 0 && m.DictionaryPageOffset < start {
				start = m.DictionaryPageOffset
			}
			if start < 4 || m.TotalCompressedSize < 0 || start+m.TotalCompressedSize > st.Size()-8 {
				return fail("row group %d, column %d: %d bytes at offset %d lie outside the file of %d bytes", g, c, m.TotalCompressedSize, start, st.Size())
			}
		}
		rr := rg.Rows()
		for {
			k, rerr := rr.ReadRows(rows)
			for i := range k {
				n++
				at := RecordPos{File: path, Row: n}
				var v any
				if err := schema.Reconstruct(&v, rows[i]); err != nil {
					rr.Close()
					return posErr(at, err)
				}
				rec, err := parquetRecord(v)
				if err != nil {
					rr.Close()
					return posErr(at, err)
				}
				if err := fn(rec, at); err != nil {
					rr.Close()
					return err
				}
			}
			if errors.Is(rerr, io.EOF) {
				break
			}
			if rerr != nil {
				rr.Close()
				return fail("row group %d: %v", g, rerr)
			}
		}
		if err := rr.Close(); err != nil {
			return fail("row group %d: %v", g, err)
		}
	}
	return nil
}

// parquetRecord turns a reconstructed row into a record's JSON fields.
func parquetRecord(v any) (map[string]json.RawMessage, error) {
	row, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("row is %T, want a group of columns", v)
	}
	rec := make(map[string]json.RawMessage, len(row))
	for k, val := range row {
		b, err := json.Marshal(jsonable(val))
		if err != nil {
			return nil, fmt.Errorf("column %q: %v", k, err)
		}
		rec[k] = b
	}
	return rec, nil
}

// jsonable turns byte arrays (BYTE_ARRAY columns without a STRING
// annotation) into strings, as pyarrow reads such text, all the way down.
func jsonable(v any) any {
	switch x := v.(type) {
	case []byte:
		return string(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonable(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonable(e)
		}
		return out
	}
	return v
}
