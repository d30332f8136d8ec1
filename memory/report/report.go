package report

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/memfit/memfit/internal/atomicfile"
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
	if err := atomicfile.Write(path, func(w io.Writer) error { return Write(w, format, a) }); err != nil {
		return fmt.Errorf("memory report %s: %w", path, err)
	}
	return nil
}
