package data

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// thriftWriter writes Thrift's compact protocol, to build parquet files
// byte by byte, hostile ones included.
type thriftWriter struct {
	b    []byte
	last []int16 // the last field id of each open struct
}

func (w *thriftWriter) uvarint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *thriftWriter) zigzag(v int64)   { w.uvarint(uint64(v<<1 ^ v>>63)) }

// begin opens a struct (at the top, in a list, or after field(id,
// thriftStruct)); end closes it.
func (w *thriftWriter) begin() { w.last = append(w.last, 0) }
func (w *thriftWriter) end() {
	w.b = append(w.b, thriftStop)
	w.last = w.last[:len(w.last)-1]
}

func (w *thriftWriter) field(id int16, t byte) {
	last := &w.last[len(w.last)-1]
	if d := id - *last; d > 0 && d <= 15 {
		w.b = append(w.b, byte(d)<<4|t)
	} else {
		w.b = append(w.b, t)
		w.zigzag(int64(id))
	}
	*last = id
}

func (w *thriftWriter) i32(id int16, v int64) { w.field(id, thriftI32); w.zigzag(v) }
func (w *thriftWriter) i64(id int16, v int64) { w.field(id, thriftI64); w.zigzag(v) }
func (w *thriftWriter) str(id int16, s string) {
	w.field(id, thriftBinary)
	w.uvarint(uint64(len(s)))
	w.b = append(w.b, s...)
}

// list writes a list field's header: n elements of type et follow.
func (w *thriftWriter) list(id int16, et byte, n int) {
	w.field(id, thriftList)
	w.listHeader(et, n)
}

func (w *thriftWriter) listHeader(et byte, n int) {
	if n < 15 {
		w.b = append(w.b, byte(n)<<4|et)
		return
	}
	w.b = append(w.b, 0xf0|et)
	w.uvarint(uint64(n))
}

// pqPage is a data page (v1) of a required BYTE_ARRAY column.
type pqPage struct {
	uncompressed, compressed int64 // -1: that of the data
	values                   int64
	data                     []byte
}

func (p pqPage) bytes() []byte {
	u, c := p.uncompressed, p.compressed
	if c < 0 {
		c = int64(len(p.data))
	}
	var w thriftWriter
	w.begin()
	w.i32(1, int64(format.DataPage))
	w.i32(2, u)
	w.i32(3, c)
	w.field(5, thriftStruct)
	w.begin()
	w.i32(1, p.values)
	w.i32(2, int64(format.Plain))
	w.i32(3, int64(format.RLE))
	w.i32(4, int64(format.RLE))
	w.end()
	w.end()
	return append(w.b, p.data...)
}

// plainValues is the PLAIN encoding of byte arrays.
func plainValues(vals ...string) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}

// pqFile is a parquet file of columns "text", "text2", ... (required
// UTF-8 strings), each column chunk chunk, codec codec, in rowGroups row
// groups of rows rows each (every row group the same chunks). footer, if
// set, writes more FileMetaData fields.
type pqFile struct {
	chunk     []byte
	codec     format.CompressionCodec
	rows      int
	rowGroups int
	columns   int
	footer    func(w *thriftWriter)
}

func (f pqFile) bytes() []byte {
	cols := max(f.columns, 1)
	file := []byte("PAR1")
	offs := make([]int, cols)
	for c := range cols {
		offs[c] = len(file)
		file = append(file, f.chunk...)
	}
	name := func(c int) string {
		if c == 0 {
			return "text"
		}
		return fmt.Sprintf("text%d", c+1)
	}
	var w thriftWriter
	w.begin()
	w.i32(1, 1)
	w.list(2, thriftStruct, 1+cols)
	w.begin()
	w.str(4, "schema")
	w.i32(5, int64(cols))
	w.end()
	for c := range cols {
		w.begin()
		w.i32(1, int64(format.ByteArray))
		w.i32(3, int64(format.Required))
		w.str(4, name(c))
		w.i32(6, 0) // UTF8
		w.end()
	}
	w.i64(3, int64(f.rows*f.rowGroups))
	w.list(4, thriftStruct, f.rowGroups)
	for range f.rowGroups {
		w.begin()
		w.list(1, thriftStruct, cols)
		for c := range cols {
			w.begin()
			w.i64(2, int64(offs[c]))
			w.field(3, thriftStruct)
			w.begin()
			w.i32(1, int64(format.ByteArray))
			w.list(2, thriftI32, 1)
			w.zigzag(int64(format.Plain))
			w.list(3, thriftBinary, 1)
			w.uvarint(uint64(len(name(c))))
			w.b = append(w.b, name(c)...)
			w.i32(4, int64(f.codec))
			w.i64(5, int64(f.rows))
			w.i64(6, int64(len(f.chunk)))
			w.i64(7, int64(len(f.chunk)))
			w.i64(9, int64(offs[c]))
			w.end()
			w.end()
		}
		w.i64(2, int64(len(f.chunk)*cols))
		w.i64(3, int64(f.rows))
		w.end()
	}
	if f.footer != nil {
		f.footer(&w)
	}
	w.end()
	return withFooter(file, w.b)
}

// withFooter appends a footer, its length and the magic.
func withFooter(file, footer []byte) []byte {
	file = append(file, footer...)
	file = binary.LittleEndian.AppendUint32(file, uint32(len(footer)))
	return append(file, "PAR1"...)
}

// readAll reads every record at path, returning the texts and the error.
func readAll(path string, maxBytes int64) ([]string, error) {
	r, err := OpenRecordsLimit(path, maxBytes)
	if err != nil {
		return nil, err
	}
	var texts []string
	err = r.Each(func(rec Record, _ RecordPos) error {
		texts = append(texts, rec.Text)
		return nil
	})
	return texts, err
}

// codecPage compresses PLAIN values with a codec as parquet-go does.
func codecPage(t testing.TB, codec format.CompressionCodec, vals ...string) pqPage {
	plain := plainValues(vals...)
	data := plain
	if codec != format.Uncompressed {
		var err error
		if data, err = parquet.LookupCompressionCodec(codec).Encode(nil, plain); err != nil {
			t.Fatal(err)
		}
	}
	return pqPage{uncompressed: int64(len(plain)), compressed: -1, values: int64(len(vals)), data: data}
}

// TestParquetBuiltByteByByte: the files the hostile cases alter are read
// when intact, with every codec parquet-go decompresses within bounds.
func TestParquetBuiltByteByByte(t *testing.T) {
	dir := t.TempDir()
	for _, codec := range []format.CompressionCodec{format.Uncompressed, format.Snappy, format.Gzip, format.Zstd, format.Lz4Raw} {
		page := codecPage(t, codec, "hello", strings.Repeat("world ", 100), "")
		p := writeFile(t, filepath.Join(dir, codec.String()+".parquet"), pqFile{chunk: page.bytes(), codec: codec, rows: 3, rowGroups: 2, columns: 2}.bytes())
		texts, err := readAll(p, 0)
		if err != nil {
			t.Fatalf("%s: %v", codec, err)
		}
		if len(texts) != 6 || texts[3] != "hello" || texts[4] != strings.Repeat("world ", 100) {
			t.Errorf("%s: records %q", codec, texts)
		}
	}
}

// TestHostileParquet: parquet files built to overflow parquet-go's stack
// (a Thrift footer or schema nested a million deep), to make it allocate
// or decompress without bound (pages that declare or inflate to a GiB,
// lists and strings that claim 2^31 items, LZ4 that never decodes), and
// to make it build a million row groups, each end at once with an error
// naming the file, where in it (the row group, column and page) and the
// limit, having allocated little and left the file as it was.
func TestHostileParquet(t *testing.T) {
	dir := t.TempDir()
	ok := codecPage(t, format.Uncompressed, "hello")
	gz := codecPage(t, format.Gzip, "hello")
	file := func(chunk []byte, codec format.CompressionCodec) []byte {
		return pqFile{chunk: chunk, codec: codec, rows: 1, rowGroups: 1}.bytes()
	}
	page := func(p pqPage, codec format.CompressionCodec) []byte { return file(p.bytes(), codec) }
	footer := func(fields func(w *thriftWriter)) []byte {
		var w thriftWriter
		w.begin()
		fields(&w)
		w.end()
		return withFooter([]byte("PAR1"), w.b)
	}

	// A GZIP page that inflates to 16 MiB, declaring 1 KiB.
	bomb := gzipBytes(make([]byte, 16<<20))
	// ZSTD frames: one that states a content of 1 GiB; one without a
	// size, of 600 blocks that repeat a byte 128 KiB times (75 MiB).
	zstdFCS := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0}
	zstdFCS = binary.LittleEndian.AppendUint64(zstdFCS, 1<<30)
	zstdFCS = append(zstdFCS, 1, 0, 0) // an empty raw block, the last
	zstdRLE := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58}
	for i := range 600 {
		last := uint32(0)
		if i == 599 {
			last = 1
		}
		bh := uint32(128<<10)<<3 | 1<<1 | last
		zstdRLE = append(zstdRLE, byte(bh), byte(bh>>8), byte(bh>>16), 'x')
	}
	// LZ4 blocks: a match at offset 0 (parquet-go doubles its buffer
	// forever on it), and a valid one of 70,000 bytes declared as 100.
	lz4Bad := []byte{0x1f, 'a', 0, 0, 0x10, 'b'}
	lz4Big := []byte{0x1f, 'a', 1, 0} // a literal, then a match of 19+274*255 bytes
	lz4Big = append(append(lz4Big, bytes.Repeat([]byte{0xff}, 274)...), 0, 0x50, 'b', 'c', 'd', 'e', 'f')
	// A thrift struct nested n deep, as field 99 of a struct.
	deep := func(w *thriftWriter, n int) {
		w.field(99, thriftStruct)
		for range n {
			w.b = append(w.b, 1<<4|thriftStruct)
		}
		for range n + 1 {
			w.b = append(w.b, thriftStop)
		}
	}
	deepPage := func() []byte {
		var w thriftWriter
		w.begin()
		w.i32(1, 0)
		w.i32(2, 9)
		w.i32(3, 9)
		deep(&w, 100000)
		w.b = append(w.b, thriftStop)
		return append(w.b, plainValues("hello")...)
	}
	// A schema of a million groups, each the parent of the next; and of
	// 1000, which the limit on elements lets through to that on depth.
	nested := func(n int) []byte {
		return footer(func(w *thriftWriter) {
			w.i32(1, 1)
			w.list(2, thriftStruct, n+1)
			for i := range n {
				w.begin()
				w.str(4, fmt.Sprint("g", i))
				w.i32(5, 1)
				w.end()
			}
			w.begin()
			w.i32(1, int64(format.ByteArray))
			w.str(4, "text")
			w.end()
			w.i64(3, 0)
			w.list(4, thriftStruct, 0)
		})
	}
	manyGroups := func(n int) []byte {
		return footer(func(w *thriftWriter) {
			w.i32(1, 1)
			w.list(2, thriftStruct, 0)
			w.i64(3, 0)
			w.list(4, thriftStruct, n)
			for range n {
				w.begin()
				w.i64(2, 0)
				w.i64(3, 0)
				w.end()
			}
		})
	}
	bigFooter := filepath.Join(dir, "big-footer.parquet")
	func() {
		f, err := os.Create(bigFooter)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.WriteString("PAR1")
		f.Truncate(20 << 20) // sparse
		tail := binary.LittleEndian.AppendUint32(nil, 17<<20)
		f.WriteAt(append(tail, "PAR1"...), 20<<20-8)
	}()

	cases := []struct {
		name string
		b    []byte
		want []string
	}{
		{"thrift footer nested a million deep", footer(func(w *thriftWriter) { deep(w, 1000000) }), []string{"footer", "nests deeper than 32 levels, the limit"}},
		{"schema of a million nested groups", nested(1000000), []string{"footer", "a schema of 1000001 elements, over the limit of 1024"}},
		{"schema nested 1000 deep", nested(1000), []string{"the schema nests deeper than 32 levels, the limit"}},
		{"a million row groups", manyGroups(1000000), []string{"footer", "1000000 row groups, over the limit of 32767"}},
		{"40000 row groups", manyGroups(40000), []string{"40000 row groups, over the limit of 32767"}},
		{"2000 row groups of 40 columns", pqFile{chunk: ok.bytes(), rows: 1, rowGroups: 2000, columns: 40}.bytes(), []string{"more than 65536 column chunks (row groups × columns), the limit"}},
		{"a footer of 17 MiB", nil, []string{"footer of 17825792 bytes, over the limit of 16 MiB on a footer"}},
		{"a list of 2^31-1 items", footer(func(w *thriftWriter) { w.list(5, thriftStruct, 1<<31-1) }), []string{"footer", "a list of 2147483647 items"}},
		{"a string of 2^31-1 bytes", footer(func(w *thriftWriter) {
			w.field(6, thriftBinary)
			w.uvarint(1<<31 - 1)
		}), []string{"footer", "a string of 2147483647 bytes, over the limit of 16 MiB"}},
		{"GZIP page declaring 1 GiB", page(pqPage{uncompressed: 1 << 30, compressed: -1, values: 1, data: gz.data}, format.Gzip),
			[]string{"row group 0, column 0 (text): page 0 (at byte 4): declares 1073741824 bytes decompressed, over the limit of 64 MiB on a page"}},
		{"GZIP page inflating past its header", page(pqPage{uncompressed: 1024, compressed: -1, values: 1, data: bomb}, format.Gzip),
			[]string{"row group 0, column 0 (text): page 0", "GZIP data decompresses to 1025 bytes or more, past the 1024 its header declares"}},
		{"ZSTD frame of 1 GiB", page(pqPage{uncompressed: 9, compressed: -1, values: 1, data: zstdFCS}, format.Zstd),
			[]string{"page 0", "ZSTD data may decompress to 1073741824 bytes, over the limit of 64 MiB on a page"}},
		{"ZSTD blocks of 75 MiB", page(pqPage{uncompressed: 9, compressed: -1, values: 1, data: zstdRLE}, format.Zstd),
			[]string{"page 0", "ZSTD data may decompress to", "over the limit of 64 MiB on a page"}},
		{"SNAPPY length of 1 GiB", page(pqPage{uncompressed: 9, compressed: -1, values: 1, data: binary.AppendUvarint(nil, 1<<30)}, format.Snappy),
			[]string{"page 0", "SNAPPY data decompresses to 1073741824 bytes or more, past the 9 its header declares"}},
		{"LZ4_RAW match at offset 0", page(pqPage{uncompressed: 9, compressed: -1, values: 1, data: lz4Bad}, format.Lz4Raw),
			[]string{"page 0", "LZ4_RAW data: a match at offset 0"}},
		{"LZ4_RAW past its header", page(pqPage{uncompressed: 100, compressed: -1, values: 1, data: lz4Big}, format.Lz4Raw),
			[]string{"page 0", "LZ4_RAW data decompresses to", "past the 100 its header declares"}},
		{"BROTLI", page(codecPage(t, format.Brotli, "hello"), format.Brotli), []string{"page 0", "BROTLI data, which parquet-go decompresses without a bound"}},
		{"2^31-1 values in a page", page(pqPage{uncompressed: 9, compressed: -1, values: 1<<31 - 1, data: ok.data}, format.Uncompressed),
			[]string{"page 0", "2147483647 values, over the limit of 4194304 on a page"}},
		{"page data past its chunk", page(pqPage{uncompressed: 9, compressed: 1 << 30, values: 1, data: ok.data}, format.Uncompressed),
			[]string{"page 0", "1073741824 bytes of data, past the end of the column chunk"}},
		{"page header nested 100,000 deep", file(deepPage(), format.Uncompressed), []string{"page 0 (at byte 4): header: nests deeper than 32 levels, the limit"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := bigFooter
			if c.b != nil {
				p = writeFile(t, filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".parquet"), c.b)
			}
			before, _ := os.ReadFile(p)
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			start := time.Now()
			_, err := readAll(p, 0)
			took := time.Since(start)
			runtime.ReadMemStats(&m1)
			wantErr(t, err, append(c.want, "parquet: "+p)...)
			if took > 10*time.Second {
				t.Errorf("%v to refuse it", took)
			}
			if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 256<<20 {
				t.Errorf("allocated %d MiB refusing it", alloc>>20)
			}
			if after, _ := os.ReadFile(p); !bytes.Equal(before, after) {
				t.Error("the file changed")
			}
			t.Logf("%v, %v", took, err)
		})
	}
}

// TestParquetRowOverTheRecordLimit: a row larger than the limit on a
// record is refused, naming it.
func TestParquetRowOverTheRecordLimit(t *testing.T) {
	page := codecPage(t, format.Snappy, "short", strings.Repeat("long ", 300), "short")
	p := writeFile(t, filepath.Join(t.TempDir(), "rows.parquet"), pqFile{chunk: page.bytes(), codec: format.Snappy, rows: 3, rowGroups: 1}.bytes())
	texts, err := readAll(p, 1<<10)
	wantErr(t, err, p, "row 2: record over the limit of 1 KiB on one record")
	if len(texts) != 1 {
		t.Errorf("%d records before the refusal", len(texts))
	}
	if texts, err := readAll(p, 2<<10); err != nil || len(texts) != 3 {
		t.Errorf("under a limit of 2 KiB: %d records, %v", len(texts), err)
	}
}

// FuzzParquetFooter: arbitrary footers after a valid column chunk (and
// valid footers' mutations) are refused or read, never a panic, a stack
// overflow or memory without bound.
func FuzzParquetFooter(f *testing.F) {
	page := codecPage(f, format.Snappy, "hello", "world")
	good := pqFile{chunk: page.bytes(), codec: format.Snappy, rows: 2, rowGroups: 2, columns: 2}.bytes()
	chunkEnd := 4 + 2*len(page.bytes())
	f.Add(good[chunkEnd : len(good)-8])
	for _, name := range []string{"text", "prompt_completion", "chat", "alpaca"} {
		b, err := os.ReadFile(filepath.Join("testdata", "records", name+".parquet"))
		if err != nil {
			f.Fatal(err)
		}
		n := int(binary.LittleEndian.Uint32(b[len(b)-8:]))
		f.Add(b[len(b)-8-n : len(b)-8])
	}
	f.Add([]byte{0x15, 0x02, 0x19, 0xfc, 0x7f, 0xff, 0xff, 0xff, 0x07, 0x00})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, footer []byte) {
		checkFooter(footer) // the walk alone
		p := filepath.Join(dir, "f.parquet")
		if err := os.WriteFile(p, withFooter(bytes.Clone(good[:chunkEnd]), footer), 0o644); err != nil {
			t.Fatal(err)
		}
		readAll(p, 1<<20)
	})
}

// FuzzLZ4RawSize: whatever lz4RawSize accepts, the LZ4 decoder parquet-go
// uses decodes, to the size lz4RawSize says, at the first try (else
// parquet-go would double its buffer for it without end).
func FuzzLZ4RawSize(f *testing.F) {
	for _, s := range []string{"", "a", "hello hello hello hello hello", strings.Repeat("abc", 1000), strings.Repeat("x", 70000)} {
		b, err := parquet.Lz4Raw.Encode(nil, []byte(s))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x1f, 'a', 1, 0, 0xff, 0x10, 0x50, 'b', 'c', 'd', 'e', 'f'})
	f.Fuzz(func(t *testing.T, src []byte) {
		n, err := lz4RawSize(src, 1<<20)
		if err != nil || n > 1<<20 {
			return
		}
		out, err := parquet.Lz4Raw.Decode(make([]byte, n), src)
		if err != nil || int64(len(out)) != n {
			t.Fatalf("%x: lz4RawSize says %d bytes, the decoder gives %d, %v", src, n, len(out), err)
		}
	})
}
