package report

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/memfit/memfit/memory"
)

// The formats.
const (
	HTML = "html"
	SVG  = "svg"
	Text = "txt"
)

// FormatOf picks the format of a report from the file name's extension:
// .html or .htm, .svg, .txt or .text (any case).
func FormatOf(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".html", ".htm":
		return HTML, nil
	case ".svg":
		return SVG, nil
	case ".txt", ".text":
		return Text, nil
	}
	return "", fmt.Errorf("memory report %q: cannot tell the format from the extension (want .html, .svg or .txt)", path)
}

// Write writes a report of a's current state and history in format ("html",
// "svg" or "txt").
func Write(w io.Writer, format string, a *memory.Allocator) error {
	return WriteSnapshot(w, format, a.Snapshot())
}

// WriteSnapshot writes a report of s in format ("html", "svg" or "txt").
func WriteSnapshot(w io.Writer, format string, s memory.Snapshot) error {
	tl := NewTimeline(s)
	switch format {
	case HTML:
		return writeHTML(w, s, tl)
	case SVG:
		_, err := io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+newChart(tl, false).svg())
		return err
	case Text:
		return writeText(w, s, tl)
	}
	return fmt.Errorf("memory report: unknown format %q (want html, svg or txt)", format)
}

// WriteFile writes a report of a to path, in the format its extension names
// (see FormatOf). It writes a temporary file beside path, syncs it and
// renames it over path, so that path holds either the old report or the
// whole new one, never a part.
func WriteFile(path string, a *memory.Allocator) error {
	format, err := FormatOf(path)
	if err != nil {
		return err
	}
	return writeAtomic(path, func(w io.Writer) error { return Write(w, format, a) })
}

// writeAtomic writes path through a synced temporary file and a rename.
func writeAtomic(path string, write func(io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("memory report: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("memory report %s: %w", path, err)
		}
	}()
	if err = write(f); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	// Make the rename itself durable. Not every system can sync a
	// directory, and the report is whole either way, so errors are ignored.
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
