package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// isParquet reports whether f starts with parquet's magic bytes.
func isParquet(f io.ReaderAt) bool {
	var m [4]byte
	n, _ := f.ReadAt(m[:], 0)
	return n == 4 && string(m[:]) == "PAR1"
}

// parquetBatch is how many rows are decoded at once.
const parquetBatch = 64

// Limits on a parquet file of records, each checked before parquet-go
// decodes what it bounds: parquet-go recurses once per level of the
// footer's Thrift and of the schema (a file of a million nested groups
// overflows the stack, which no recover catches), allocates lists and
// strings as long as their headers say, builds its structures for every
// row group at open, and decompresses a page into as much memory as the
// data asks (GZIP and BROTLI streams without end, LZ4_RAW doubling its
// buffer on corrupt data). Records are flat JSON objects: no real records
// file comes near these.
const (
	// parquetMaxFooter bounds the footer's bytes: the metadata of
	// thousands of row groups, statistics and all (pyarrow's files of a
	// few hundred MB have footers of some KB); parquet-go holds about
	// three copies while it decodes.
	parquetMaxFooter = 16 << 20
	// parquetMaxThriftDepth bounds the nesting of the footer's and page
	// headers' Thrift structures, four times parquet's deepest
	// (FileMetaData, row_groups, RowGroup, columns, ColumnChunk,
	// meta_data, size or geospatial statistics, a list in them).
	parquetMaxThriftDepth = 32
	// parquetMaxFooterItems bounds the footer's list items all told
	// (some twenty a column chunk).
	parquetMaxFooterItems = 1 << 21
	// parquetMaxSchema bounds the schema's elements (groups and columns):
	// a chat record's schema has about ten.
	parquetMaxSchema = 1024
	// parquetMaxSchemaDepth bounds the schema's nesting (a chat record's
	// messages.list.element.content.list.element.text is 7 deep).
	parquetMaxSchemaDepth = 32
	// parquetMaxRowGroups is parquet's own bound on row groups (their
	// ordinal is 16 bits).
	parquetMaxRowGroups = parquet.MaxRowGroups
	// parquetMaxChunks bounds the column chunks (row groups × columns)
	// whose structures parquet-go builds at open.
	parquetMaxChunks = 1 << 16
	// parquetMaxPageValues bounds a page's values (parquet-go allocates
	// levels and indexes for each): 200 times the 20,000 rows pyarrow and
	// Arrow's Rust writer put in a page.
	parquetMaxPageValues = 1 << 22
	// parquetMaxPageHeader bounds a page header's bytes (its statistics'
	// strings are cut to a few KB by writers).
	parquetMaxPageHeader = 16 << 20
)

// parquetMaxPage is the most bytes a page may hold, compressed or
// decompressed, unless a record may take more: 64 times the 1 MiB pages
// pyarrow, Arrow and Spark write.
const parquetMaxPage = 64 << 20

// parquetPageLimit is the most bytes a page may hold: parquetMaxPage, or
// more where a record may take more (a value larger than a page goes
// into a page of its own).
func parquetPageLimit(maxRecord int64) int64 { return max(parquetMaxPage, maxRecord) }

// eachParquet reads a parquet file one row group at a time (parquet-go
// reads a column chunk's pages as the rows need them, through ReadAt), and
// hands fn each row as a JSON object, as a JSON Lines record would be:
// lists are arrays, structs objects, nulls null. Rows are counted from 1.
// The footer is checked before parquet-go decodes it, and each row
// group's pages before its rows are read (parquetMax*).
func eachParquet(f *os.File, path string, maxBytes int64, fn func(map[string]json.RawMessage, RecordPos) error) (err error) {
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
	size := st.Size()
	if size < 12 {
		return fail("%d bytes: too short for a parquet file", size)
	}
	var tail [8]byte
	if _, err := f.ReadAt(tail[:], size-8); err != nil {
		return fail("%v", err)
	}
	switch m := string(tail[4:]); m {
	case "PAR1":
	case "PARE":
		return fail("an encrypted footer: not read")
	default:
		return fail("ends with %q, not parquet's magic PAR1: the file is damaged or truncated", m)
	}
	// parquet-go allocates the footer's length as the file states it.
	n := int64(binary.LittleEndian.Uint32(tail[:]))
	if n > size-12 {
		return fail("footer of %d bytes in a file of %d: the file is damaged or truncated", n, size)
	}
	if n > parquetMaxFooter {
		return fail("footer of %d bytes, over the limit of %s on a footer", n, sizeString(parquetMaxFooter))
	}
	footer := make([]byte, n)
	if _, err := f.ReadAt(footer, size-8-n); err != nil {
		return fail("reading the footer: %v", err)
	}
	if err := checkFooter(footer); err != nil {
		return fail("footer: %v", err)
	}
	footer = nil
	pf, err := parquet.OpenFile(f, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return fail("%v", err)
	}
	schema := pf.Schema()
	rows := make([]parquet.Row, parquetBatch)
	row := 0
	meta := pf.Metadata()
	pages := pageChecker{r: f, limit: parquetPageLimit(maxBytes)}
	for g, rg := range pf.RowGroups() {
		// Column chunks outside the file are damage that parquet-go
		// would find only after allocating what the page headers
		// claim; a page that would decompress past its header or the
		// limit is refused before parquet-go decompresses it.
		for c, col := range meta.RowGroups[g].Columns {
			m := col.MetaData
			// Where parquet-go starts reading the chunk's pages, and the
			// codec it decompresses them with: its first chunk's.
			start := m.DataPageOffset
			if m.DictionaryPageOffset != 0 {
				start = m.DictionaryPageOffset
			}
			if start < 4 || m.TotalCompressedSize < 0 || start > size-8 || m.TotalCompressedSize > size-8-start {
				return fail("row group %d, column %d: %d bytes at offset %d lie outside the file of %d bytes", g, c, m.TotalCompressedSize, start, size)
			}
			codec := meta.RowGroups[0].Columns[c].MetaData.Codec
			if err := pages.check(start, m.TotalCompressedSize, codec); err != nil {
				return fail("row group %d, column %d (%s): %v", g, c, strings.Join(m.PathInSchema, "."), err)
			}
		}
		rr := rg.Rows()
		for {
			k, rerr := rr.ReadRows(rows)
			for i := range k {
				row++
				at := RecordPos{File: path, Row: row}
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
				if recordBytes(rec) > maxBytes {
					rr.Close()
					return posErr(at, &RecordTooLargeError{Limit: maxBytes})
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

// recordBytes is the size of a record as a JSON object.
func recordBytes(rec map[string]json.RawMessage) int64 {
	n := int64(2)
	for k, v := range rec {
		n += int64(len(k) + len(v) + 4)
	}
	return n
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

// checkFooter walks a footer's FileMetaData before parquet-go decodes it:
// its nesting and items (parquetMaxThriftDepth, parquetMaxFooterItems),
// the schema's elements and nesting as parquet-go will open them
// (parquetMaxSchema, parquetMaxSchemaDepth), the row groups and column
// chunks (parquetMaxRowGroups, parquetMaxChunks).
func checkFooter(b []byte) error {
	w := &thriftWalker{b: b, maxDepth: parquetMaxThriftDepth, maxItems: parquetMaxFooterItems, maxBinary: parquetMaxFooter}
	type element struct {
		leaf     bool  // has a type: a column
		children int32 // num_children
	}
	var elems []element
	rowGroups, chunks, schemas := 0, 0, 0
	err := w.fields(1, func(id int16, t byte) (bool, error) {
		switch {
		case id == 2 && t == thriftList: // schema
			if schemas++; schemas > 1 {
				return false, errors.New("holds two schemas")
			}
			n, et, err := w.listHeader(2)
			if err != nil {
				return false, err
			}
			if n > parquetMaxSchema {
				return false, fmt.Errorf("a schema of %d elements, over the limit of %d", n, parquetMaxSchema)
			}
			for range n {
				if et != thriftStruct {
					if err := w.elem(et, 2); err != nil {
						return false, err
					}
					continue
				}
				var e element
				err := w.fields(3, func(id int16, t byte) (bool, error) {
					switch {
					case id == 1 && t == thriftI32:
						e.leaf = true
						_, err := w.i32()
						return true, err
					case id == 5 && t == thriftI32:
						v, err := w.i32()
						e.children = v
						return true, err
					}
					return false, nil
				})
				if err != nil {
					return false, err
				}
				elems = append(elems, e)
			}
			return true, nil
		case id == 4 && t == thriftList: // row_groups
			if rowGroups > 0 {
				return false, errors.New("holds two lists of row groups")
			}
			n, et, err := w.listHeader(2)
			if err != nil {
				return false, err
			}
			if n > parquetMaxRowGroups {
				return false, fmt.Errorf("%d row groups, over the limit of %d", n, parquetMaxRowGroups)
			}
			rowGroups = max(n, 1)
			for range n {
				if et != thriftStruct {
					if err := w.elem(et, 2); err != nil {
						return false, err
					}
					continue
				}
				err := w.fields(3, func(id int16, t byte) (bool, error) {
					if id != 1 || t != thriftList { // columns
						return false, nil
					}
					k, et, err := w.listHeader(4)
					if err != nil {
						return false, err
					}
					if chunks += k; chunks > parquetMaxChunks {
						return false, fmt.Errorf("more than %d column chunks (row groups × columns), the limit", parquetMaxChunks)
					}
					for range k {
						if err := w.elem(et, 4); err != nil {
							return false, err
						}
					}
					return true, nil
				})
				if err != nil {
					return false, err
				}
			}
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	if w.p != len(b) {
		return fmt.Errorf("%d bytes follow the metadata (a signed footer?)", len(b)-w.p)
	}
	// The schema as parquet-go opens it: depth first, an element without
	// a type a group of num_children elements.
	leaves, open := 0, []int32{}
	for i, e := range elems {
		if len(open) >= parquetMaxSchemaDepth {
			return fmt.Errorf("the schema nests deeper than %d levels, the limit (element %d)", parquetMaxSchemaDepth, i)
		}
		if !e.leaf && e.children > 0 {
			open = append(open, e.children)
			continue
		}
		if e.leaf {
			leaves++
		}
		for len(open) > 0 {
			if open[len(open)-1]--; open[len(open)-1] > 0 {
				break
			}
			open = open[:len(open)-1]
		}
		if len(open) == 0 {
			break
		}
	}
	if leaves*rowGroups > parquetMaxChunks {
		return fmt.Errorf("%d columns in %d row groups: more than %d column chunks, the limit", leaves, rowGroups, parquetMaxChunks)
	}
	return nil
}

// pageChecker checks the pages of column chunks before parquet-go reads
// them: each page header walked as the footer is, its sizes and values
// within the limits, its data within the chunk, and its compressed data
// shown to decompress to no more than its header declares, without
// decompressing it where the codec's framing says (SNAPPY's length, ZSTD's
// block headers, LZ4_RAW's sequences) and into no memory otherwise
// (GZIP, streamed to nothing up to the declared size). BROTLI, whose
// size shows only by decompressing it, and which parquet-go decompresses
// without bound, is refused.
type pageChecker struct {
	r     io.ReaderAt
	limit int64 // bytes of a page, compressed or not
	buf   []byte
}

// read returns n bytes at off.
func (pc *pageChecker) read(off, n int64) ([]byte, error) {
	if int64(cap(pc.buf)) < n {
		pc.buf = make([]byte, n)
	}
	b := pc.buf[:n]
	if _, err := pc.r.ReadAt(b, off); err != nil {
		return nil, err
	}
	return b, nil
}

// pageHeader holds the fields of a PageHeader that bound its decoding.
type pageHeader struct {
	uncompressed, compressed int32
	values                   int32 // of whichever page header it has
	levels                   int64 // data page v2: level bytes before the data
	compressedData           bool  // data page v2's is_compressed (default true)
}

// check checks the pages of the column chunk of n bytes at off, whose
// pages parquet-go decompresses with codec.
func (pc *pageChecker) check(off, n int64, codec format.CompressionCodec) error {
	end := off + n
	for page := 0; off < end; page++ {
		h, hlen, err := pc.header(off, end)
		if err != nil {
			return fmt.Errorf("page %d (at byte %d): header: %v", page, off, err)
		}
		at := off
		bad := func(format string, args ...any) error {
			return fmt.Errorf("page %d (at byte %d): %s", page, at, fmt.Sprintf(format, args...))
		}
		off += int64(hlen)
		switch {
		case h.compressed < 0 || h.uncompressed < 0:
			return bad("negative size (%d bytes compressed, %d not)", h.compressed, h.uncompressed)
		case int64(h.compressed) > end-off:
			return bad("%d bytes of data, past the end of the column chunk", h.compressed)
		case int64(h.compressed) > pc.limit:
			return bad("%d bytes of data, over the limit of %s on a page", h.compressed, sizeString(pc.limit))
		case int64(h.uncompressed) > pc.limit:
			return bad("declares %d bytes decompressed, over the limit of %s on a page", h.uncompressed, sizeString(pc.limit))
		case h.values < 0 || h.values > parquetMaxPageValues:
			return bad("%d values, over the limit of %d on a page", h.values, parquetMaxPageValues)
		case h.levels > int64(h.compressed):
			return bad("%d bytes of levels in %d bytes of data", h.levels, h.compressed)
		}
		if h.compressedData && codec != format.Uncompressed {
			if err := pc.payload(off+h.levels, int64(h.compressed)-h.levels, int64(h.uncompressed), codec); err != nil {
				return bad("%v", err)
			}
		}
		off += int64(h.compressed)
	}
	return nil
}

// header reads the page header at off, before end.
func (pc *pageChecker) header(off, end int64) (pageHeader, int, error) {
	n := min(end-off, 4<<10)
	for {
		b, err := pc.read(off, n)
		if err != nil {
			return pageHeader{}, 0, err
		}
		h, used, err := parsePageHeader(b)
		if errors.Is(err, errThriftShort) && n < end-off {
			if n >= parquetMaxPageHeader {
				return pageHeader{}, 0, fmt.Errorf("more than %s, the limit on a page header", sizeString(parquetMaxPageHeader))
			}
			n = min(end-off, 8*n, parquetMaxPageHeader)
			continue
		}
		return h, used, err
	}
}

// parsePageHeader walks a PageHeader at the start of b and returns its
// bounds and length.
func parsePageHeader(b []byte) (pageHeader, int, error) {
	w := &thriftWalker{b: b, maxDepth: parquetMaxThriftDepth, maxItems: 1 << 16, maxBinary: parquetMaxPageHeader}
	h := pageHeader{compressedData: true}
	i32 := func(p *int32) (bool, error) {
		v, err := w.i32()
		*p = v
		return true, err
	}
	err := w.fields(1, func(id int16, t byte) (bool, error) {
		switch {
		case id == 2 && t == thriftI32:
			return i32(&h.uncompressed)
		case id == 3 && t == thriftI32:
			return i32(&h.compressed)
		case (id == 5 || id == 7 || id == 8) && t == thriftStruct: // data, dictionary, data v2
			v2 := id == 8
			return true, w.fields(2, func(id int16, t byte) (bool, error) {
				switch {
				case id == 1 && t == thriftI32:
					return i32(&h.values)
				case v2 && (id == 5 || id == 6) && t == thriftI32:
					var n int32
					done, err := i32(&n)
					if n < 0 {
						return done, fmt.Errorf("level bytes %d", n)
					}
					h.levels += int64(n)
					return done, err
				case v2 && id == 7 && (t == thriftTrue || t == thriftFalse):
					h.compressedData = t == thriftTrue
					return true, nil
				}
				return false, nil
			})
		}
		return false, nil
	})
	return h, w.p, err
}

// payload checks that the n bytes of compressed data at off decompress
// with codec to no more than declared bytes.
func (pc *pageChecker) payload(off, n, declared int64, codec format.CompressionCodec) error {
	over := func(got int64) error {
		return fmt.Errorf("%s data decompresses to %d bytes or more, past the %d its header declares", codec, got, declared)
	}
	switch codec {
	case format.Snappy:
		// A SNAPPY block starts with its decompressed length, which
		// the decoder allocates.
		b, err := pc.read(off, min(n, binary.MaxVarintLen64))
		if err != nil {
			return err
		}
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return errors.New("SNAPPY data without its length")
		}
		if v > uint64(declared) {
			return over(int64(min(v, math.MaxInt64)))
		}
	case format.Gzip:
		b, err := pc.read(off, n)
		if err != nil {
			return err
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("GZIP data: %v", err)
		}
		got, err := io.CopyN(io.Discard, zr, declared+1)
		if got > declared {
			return over(got)
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("GZIP data: %v", err)
		}
	case format.Zstd:
		b, err := pc.read(off, n)
		if err != nil {
			return err
		}
		bound, err := zstdBound(b, pc.limit)
		if err != nil {
			return fmt.Errorf("ZSTD data: %v", err)
		}
		if bound > pc.limit {
			return fmt.Errorf("ZSTD data may decompress to %d bytes, over the limit of %s on a page", bound, sizeString(pc.limit))
		}
	case format.Lz4Raw:
		b, err := pc.read(off, n)
		if err != nil {
			return err
		}
		got, err := lz4RawSize(b, declared)
		if err != nil {
			return fmt.Errorf("LZ4_RAW data: %v", err)
		}
		if got > declared {
			return over(got)
		}
	case format.Brotli:
		return errors.New("BROTLI data, which parquet-go decompresses without a bound: not read (rewrite the file with ZSTD, SNAPPY or GZIP)")
	}
	// Other codecs parquet-go does not decompress, failing instead.
	return nil
}

// zstdBound returns the most bytes the ZSTD frames of b decompress to
// (the frames' content sizes, where they state them, else the sum of
// their blocks' sizes: a compressed block holds at most 128 KiB), having
// walked their headers, stopping past limit.
func zstdBound(b []byte, limit int64) (int64, error) {
	const blockMax = 128 << 10
	total := int64(0)
	for len(b) > 0 {
		if len(b) < 4 {
			return 0, errors.New("truncated")
		}
		magic := binary.LittleEndian.Uint32(b)
		if magic&0xfffffff0 == 0x184d2a50 { // a skippable frame
			if len(b) < 8 {
				return 0, errors.New("truncated")
			}
			k := uint64(binary.LittleEndian.Uint32(b[4:]))
			if k > uint64(len(b)-8) {
				return 0, errors.New("truncated")
			}
			b = b[8+k:]
			continue
		}
		if magic != 0xfd2fb528 {
			return 0, fmt.Errorf("a frame of magic %#x, not ZSTD's", magic)
		}
		b = b[4:]
		if len(b) < 1 {
			return 0, errors.New("truncated")
		}
		fhd := b[0]
		b = b[1:]
		if fhd&0x08 != 0 {
			return 0, errors.New("a frame header's reserved bit is set")
		}
		single := fhd&0x20 != 0
		window := int64(0)
		if !single {
			if len(b) < 1 {
				return 0, errors.New("truncated")
			}
			exp, mant := int64(b[0]>>3), int64(b[0]&7)
			base := int64(1) << (10 + exp)
			window = base + base/8*mant
			b = b[1:]
		}
		dictBytes := [4]int{0, 1, 2, 4}[fhd&3]
		fcsBytes := [4]int{0, 2, 4, 8}[fhd>>6]
		if fcsBytes == 0 && single {
			fcsBytes = 1
		}
		if len(b) < dictBytes+fcsBytes {
			return 0, errors.New("truncated")
		}
		b = b[dictBytes:]
		content := int64(-1)
		switch fcsBytes {
		case 1:
			content = int64(b[0])
		case 2:
			content = int64(binary.LittleEndian.Uint16(b)) + 256
		case 4:
			content = int64(binary.LittleEndian.Uint32(b))
		case 8:
			v := binary.LittleEndian.Uint64(b)
			content = int64(min(v, math.MaxInt64))
		}
		b = b[fcsBytes:]
		if single {
			window = content
		}
		if content > limit-total {
			return total + content, nil
		}
		block := min(window, blockMax)
		sum := int64(0)
		for last := false; !last; {
			if len(b) < 3 {
				return 0, errors.New("truncated")
			}
			bh := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
			b = b[3:]
			last = bh&1 != 0
			size := int64(bh >> 3)
			switch bh >> 1 & 3 {
			case 0: // raw
				sum += size
			case 1: // run length
				sum += size
				size = 1
			case 2: // compressed
				if size > blockMax {
					return 0, fmt.Errorf("a compressed block of %d bytes", size)
				}
				sum += block
			default:
				return 0, errors.New("a block of the reserved type")
			}
			if size > int64(len(b)) {
				return 0, errors.New("truncated")
			}
			b = b[size:]
			if content < 0 && sum > limit-total {
				return total + sum, nil
			}
		}
		if fhd&0x04 != 0 { // checksum
			if len(b) < 4 {
				return 0, errors.New("truncated")
			}
			b = b[4:]
		}
		if content >= 0 {
			sum = min(sum, content)
		}
		total += sum
	}
	return total, nil
}

// lz4RawSize returns the size an LZ4 block decompresses to, stopping past
// limit, or an error where the decoder parquet-go uses
// (github.com/pierrec/lz4/v4, whose every failure parquet-go takes for a
// short buffer and answers by doubling it, without end) fails: a
// sequence cut short, an offset of 0 or before the start of the block,
// a block that ends with a match length but no match.
func lz4RawSize(src []byte, limit int64) (int64, error) {
	n := int64(len(src))
	var si, di int64
	length := func(v int64) (int64, error) {
		for {
			if si >= n {
				return 0, errors.New("a length cut short")
			}
			x := int64(src[si])
			si++
			v += x
			if x != 0xff {
				return v, nil
			}
		}
	}
	for si < n {
		tok := src[si]
		si++
		lit := int64(tok >> 4)
		if lit == 0xf {
			var err error
			if lit, err = length(lit); err != nil {
				return 0, err
			}
		}
		if lit > n-si {
			return 0, errors.New("literals past the end of the block")
		}
		si += lit
		di += lit
		ml := int64(tok & 0xf)
		if si == n && ml == 0 {
			break
		}
		if si+2 > n {
			return 0, errors.New("a match cut short")
		}
		off := int64(binary.LittleEndian.Uint16(src[si:]))
		si += 2
		if off == 0 || off > di {
			return 0, fmt.Errorf("a match at offset %d of %d bytes", off, di)
		}
		ml += 4
		if ml == 0xf+4 {
			var err error
			if ml, err = length(ml); err != nil {
				return 0, err
			}
		}
		if di += ml; di > limit {
			return di, nil
		}
	}
	return di, nil
}

// A reader of Thrift's compact protocol, the encoding of parquet's footer
// and page headers, that walks bytes without decoding them into anything:
// it checks, before parquet-go decodes the same bytes, that they nest no
// deeper and hold no more items than limits allow (parquet-go's decoder
// recurses once a level and allocates a list or string as long as its
// header says, before reading it), and hands the few fields memfit needs
// to a visitor.

// Compact protocol types.
const (
	thriftStop   = 0
	thriftTrue   = 1
	thriftFalse  = 2
	thriftI8     = 3
	thriftI16    = 4
	thriftI32    = 5
	thriftI64    = 6
	thriftDouble = 7
	thriftBinary = 8
	thriftList   = 9
	thriftSet    = 10
	thriftMap    = 11
	thriftStruct = 12
	thriftUUID   = 13
)

// errThriftShort says the bytes end inside the value.
var errThriftShort = errors.New("ends inside its metadata")

// thriftWalker walks compact-protocol bytes.
type thriftWalker struct {
	b         []byte
	p         int
	maxDepth  int // containers (structs, lists, sets, maps) inside one another
	maxItems  int // list and set elements and map entries, all told
	maxBinary int // bytes of one string or binary
	items     int
}

func (w *thriftWalker) byte() (byte, error) {
	if w.p >= len(w.b) {
		return 0, errThriftShort
	}
	c := w.b[w.p]
	w.p++
	return c, nil
}

// uvarint reads an unsigned varint of at most max.
func (w *thriftWalker) uvarint(max uint64) (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c, err := w.byte()
		if err != nil {
			return 0, err
		}
		if shift == 63 && c > 1 {
			return 0, errors.New("a varint overflows 64 bits")
		}
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			break
		}
	}
	if v > max {
		return 0, fmt.Errorf("a varint of %d, over %d", v, max)
	}
	return v, nil
}

// varint reads a zigzag varint within [lo, hi], as parquet-go does.
func (w *thriftWalker) varint(lo, hi int64) (int64, error) {
	u, err := w.uvarint(math.MaxUint64)
	if err != nil {
		return 0, err
	}
	v := int64(u>>1) ^ -int64(u&1)
	if v < lo || v > hi {
		return 0, fmt.Errorf("an integer of %d, outside [%d, %d]", v, lo, hi)
	}
	return v, nil
}

func (w *thriftWalker) i32() (int32, error) {
	v, err := w.varint(math.MinInt32, math.MaxInt32)
	return int32(v), err
}

func (w *thriftWalker) take(n int) error {
	if n > len(w.b)-w.p {
		return errThriftShort
	}
	w.p += n
	return nil
}

// count adds n items of at least min bytes each to what the walk has
// seen: a header cannot claim more than the bytes left hold.
func (w *thriftWalker) count(n uint64, min int) error {
	if n > uint64((len(w.b)-w.p)/min) {
		return fmt.Errorf("a list of %d items in %d bytes: %w", n, len(w.b)-w.p, errThriftShort)
	}
	if w.items += int(n); w.items > w.maxItems {
		return fmt.Errorf("more than %d list items, the limit", w.maxItems)
	}
	return nil
}

func (w *thriftWalker) tooDeep() error {
	return fmt.Errorf("nests deeper than %d levels, the limit", w.maxDepth)
}

// value skips a struct field's value of type t, in a container at depth.
func (w *thriftWalker) value(t byte, depth int) error {
	switch t {
	case thriftTrue, thriftFalse:
		return nil // a struct field's value is its type
	case thriftI8:
		return w.take(1)
	case thriftI16, thriftI32, thriftI64:
		_, err := w.uvarint(math.MaxUint64)
		return err
	case thriftDouble:
		return w.take(8)
	case thriftUUID:
		return w.take(16)
	case thriftBinary:
		n, err := w.uvarint(math.MaxInt32)
		if err != nil {
			return err
		}
		if n > uint64(w.maxBinary) {
			return fmt.Errorf("a string of %d bytes, over the limit of %s", n, sizeString(int64(w.maxBinary)))
		}
		return w.take(int(n))
	case thriftList, thriftSet:
		n, et, err := w.listHeader(depth + 1)
		if err != nil {
			return err
		}
		for range n {
			if err := w.elem(et, depth+1); err != nil {
				return err
			}
		}
		return nil
	case thriftMap:
		if depth+1 > w.maxDepth {
			return w.tooDeep()
		}
		n, err := w.uvarint(math.MaxInt32)
		if err != nil || n == 0 {
			return err
		}
		kv, err := w.byte()
		if err != nil {
			return err
		}
		if err := w.count(n, 2); err != nil {
			return err
		}
		for range n {
			if err := w.elem(kv>>4, depth+1); err != nil {
				return err
			}
			if err := w.elem(kv&0xf, depth+1); err != nil {
				return err
			}
		}
		return nil
	case thriftStruct:
		return w.fields(depth+1, nil)
	}
	return fmt.Errorf("a value of unknown type %d", t)
}

// elem skips a list element, or a map key or value, in a container at
// depth: a boolean takes a byte.
func (w *thriftWalker) elem(t byte, depth int) error {
	if t == thriftTrue || t == thriftFalse {
		return w.take(1)
	}
	return w.value(t, depth)
}

// listHeader reads the header of a list or set at depth and counts its
// elements.
func (w *thriftWalker) listHeader(depth int) (int, byte, error) {
	if depth > w.maxDepth {
		return 0, 0, w.tooDeep()
	}
	h, err := w.byte()
	if err != nil {
		return 0, 0, err
	}
	n := uint64(h >> 4)
	if n == 0xf {
		if n, err = w.uvarint(math.MaxInt32); err != nil {
			return 0, 0, err
		}
	}
	et := h & 0xf
	min := 1
	switch et {
	case thriftDouble:
		min = 8
	case thriftUUID:
		min = 16
	}
	if err := w.count(n, min); err != nil {
		return 0, 0, err
	}
	return int(n), et, nil
}

// fields walks the fields of a struct at depth, calling visit, if not
// nil, with each field's id and type: visit reads the value and returns
// true, or returns false to have it skipped.
func (w *thriftWalker) fields(depth int, visit func(id int16, t byte) (bool, error)) error {
	if depth > w.maxDepth {
		return w.tooDeep()
	}
	last := int16(0)
	for {
		h, err := w.byte()
		if err != nil {
			return err
		}
		if h == thriftStop {
			return nil
		}
		t := h & 0xf
		id := int16(h >> 4)
		if id != 0 {
			id += last
		} else {
			v, err := w.varint(math.MinInt16, math.MaxInt16)
			if err != nil {
				return err
			}
			id = int16(v)
		}
		last = id
		if visit != nil {
			done, err := visit(id, t)
			if err != nil {
				return err
			}
			if done {
				continue
			}
		}
		if err := w.value(t, depth); err != nil {
			return err
		}
	}
}
