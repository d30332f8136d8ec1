package data

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func windowText(w Window) string {
	b := make([]byte, len(w.Input))
	for i, t := range w.Input {
		b[i] = byte(t)
	}
	return string(b)
}

func TestCorpusConcatenates(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, filepath.Join(dir, "a"), []byte("hello "))
	e := writeFile(t, filepath.Join(dir, "e"), nil)
	b := writeFile(t, filepath.Join(dir, "b"), []byte("world, again"))
	ds, err := OpenCorpus([]string{a, e, b}, WindowOptions{Context: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	var got []string
	for i := range ds.Len() {
		ex, err := ds.Get(i)
		if err != nil {
			t.Fatal(err)
		}
		w := ex.(Window)
		got = append(got, windowText(w))
		if w.Target[3] != int32("hello world, again"[4*i+4]) {
			t.Errorf("window %d target %v", i, w.Target)
		}
	}
	if ds.Vocab() != 256 {
		t.Errorf("corpus vocabulary %d, want 256", ds.Vocab())
	}
	if s := strings.Join(got, "|"); s != "hell|o wo|rld,| aga" {
		t.Errorf("windows %q", s)
	}
	os.Truncate(b, 3)
	_, err = ds.Get(2)
	wantErr(t, err, "corpus: "+b+": record 2", b+": unexpected EOF")
}

func TestCorpusErrors(t *testing.T) {
	dir := t.TempDir()
	small := writeFile(t, filepath.Join(dir, "small"), []byte("abc"))
	_, err := OpenCorpus([]string{small}, WindowOptions{Context: 3})
	wantErr(t, err, small, "holds 3 tokens, fewer than context+1 = 4")
	_, err = OpenCorpus([]string{small, filepath.Join(dir, "gone")}, WindowOptions{Context: 1})
	wantErr(t, err, "corpus: "+filepath.Join(dir, "gone")+": no such file or directory")
	_, err = Fortunes(t.TempDir(), WindowOptions{Context: 8})
	wantErr(t, err, "no fortune files")
}

func TestFortunes(t *testing.T) {
	if _, err := os.Stat(filepath.Join(FortunesDir, "fortunes")); err != nil {
		t.Skipf("no fortunes in %s (apt-get install fortunes fortune-mod)", FortunesDir)
	}
	ds, err := Fortunes(FortunesDir, WindowOptions{Context: 64, Random: true, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	var want int64
	entries, _ := os.ReadDir(FortunesDir)
	for _, e := range entries {
		if n := e.Name(); e.Type().IsRegular() && !strings.HasSuffix(n, ".dat") && !strings.HasSuffix(n, ".u8") {
			info, _ := e.Info()
			want += info.Size()
		}
	}
	if ds.Tokens() != want || ds.Len() != int(want/64) {
		t.Errorf("%d tokens in %d windows; the files hold %d bytes", ds.Tokens(), ds.Len(), want)
	}
	letters := 0
	for i := range 50 {
		ex, err := ds.Get(i)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range windowText(ex.(Window)) {
			if c >= 'a' && c <= 'z' {
				letters++
			}
		}
	}
	if letters < 50*64/2 {
		t.Errorf("only %d lowercase letters in 50 windows of fortunes", letters)
	}
}
