package train

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/internal/atomicfile"
	"github.com/memfit/memfit/internal/regularfile"
	"github.com/memfit/memfit/memory/report"
)

// Output files are written so that a run never destroys what a path names:
// a symbolic link is followed and its target written (replacing the link
// would cut it from what it pointed to); a regular file is replaced through
// a synced temporary file and a rename, so a reader or a crash sees the old
// file or the whole new one; a stream (a FIFO, a terminal, /dev/stdout) is
// written through where the output kind allows it and refused otherwise, so
// a device node is never replaced by a regular file; a directory is refused.

// OutputKind says how an output may be written to a path that is not a
// regular file.
type OutputKind int

const (
	// FileOnly outputs (checkpoints, which are read back) must be regular
	// files: a stream would leave nothing to resume from.
	FileOnly OutputKind = iota
	// Streamable outputs (summaries, metrics, reports) may be written
	// through to a FIFO, terminal or other non-regular file.
	Streamable
)

// ResolveOutput follows symbolic links in path and says whether the target
// is (or will be) a regular file. A missing target is a regular file to
// create; its directory must exist. A directory is an error, and so is a
// non-regular target for a FileOnly output.
func ResolveOutput(path string, kind OutputKind) (target string, stream bool, err error) {
	// Stat lets the kernel follow the links, /proc's magic ones too
	// (/dev/stdout is /proc/self/fd/1, which may read "pipe:[1234]").
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		target, err = resolveLinks(path) // a dangling link: create its target
		if err != nil {
			return "", false, err
		}
		dir := filepath.Dir(target)
		di, derr := os.Stat(dir)
		if derr != nil {
			return "", false, fmt.Errorf("%s: directory %s: %v", path, dir, unwrapPath(derr))
		}
		if !di.IsDir() {
			return "", false, fmt.Errorf("%s: %s is not a directory", path, dir)
		}
		return target, false, nil
	case err != nil:
		return "", false, fmt.Errorf("%s: %v", path, unwrapPath(err))
	case fi.IsDir():
		return "", false, fmt.Errorf("%s is a directory (want a file path)", path)
	case fi.Mode().IsRegular():
		// Replace the file the links lead to, not the link.
		if target, err = filepath.EvalSymlinks(path); err != nil {
			return "", false, fmt.Errorf("%s: %v", path, unwrapPath(err))
		}
		return target, false, nil
	case kind == FileOnly:
		return "", false, fmt.Errorf("%s is %s, not a regular file: a checkpoint must be a file to resume from", path, regularfile.Describe(fi.Mode()))
	}
	return path, true, nil // opening path follows its links to the stream
}

// resolveLinks follows the symbolic links of a path that does not exist
// to the name a file would be created at (its last link dangles).
func resolveLinks(path string) (string, error) {
	for range 40 {
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return path, nil // a missing path or a non-link: the caller looks
		}
		dest, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(dest) {
			dest = filepath.Join(filepath.Dir(path), dest)
		}
		path = dest
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", path)
}

// unwrapPath drops the *PathError wrapper, whose text repeats the path the
// caller names anyway.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// CheckOutputWritable checks, without leaving anything behind, that an
// output can be created at path: the checks of ResolveOutput, then that the
// target's directory takes a new file (a regular output is replaced through
// a temporary file beside it) or that a stream opens for writing.
func CheckOutputWritable(path string, kind OutputKind) error {
	target, stream, err := ResolveOutput(path, kind)
	if err != nil {
		return err
	}
	if stream {
		return nil // opening a FIFO would block until a reader comes
	}
	f, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".check*")
	if err != nil {
		return fmt.Errorf("%s: cannot write in %s: %v", path, filepath.Dir(target), unwrapPath(err))
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// WriteOutput writes path with write, as the comment at the top of this
// file describes.
func WriteOutput(path string, kind OutputKind, write func(io.Writer) error) error {
	target, stream, err := ResolveOutput(path, kind)
	if err != nil {
		return err
	}
	if stream {
		f, err := os.OpenFile(target, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if err := write(f); err != nil {
			f.Close()
			return fmt.Errorf("writing %s: %v", path, err)
		}
		return f.Close()
	}
	return replaceFile(target, write)
}

// replaceFile writes path through atomicfile (a synced temporary file
// renamed over it, the directory synced), so readers never see a partial
// file and a crash never loses the previous one.
func replaceFile(path string, write func(io.Writer) error) error {
	err := atomicfile.Write(path, func(w io.Writer) error {
		if err := write(w); err != nil {
			return fmt.Errorf("writing %s: %v", path, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	removeStaleTemps(path)
	return nil
}

// removeStaleTemps deletes the temporary files of earlier writes of path
// that a crash (a kill during a save) left behind: each is as large as the
// file, and a run saving every step under repeated crashes would fill the
// disk with them. It runs once the new file is in place, so nothing it
// removes is needed; a second process writing the same path at the same
// time would see its rename fail, which is an error either way.
func removeStaleTemps(path string) {
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "."+globEscape(filepath.Base(path))+".tmp*"))
	for _, p := range stale {
		os.Remove(p)
	}
}

// globEscape quotes the characters filepath.Match treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// writeAtomic writes a checkpoint file: a regular file, replaced whole.
func writeAtomic(path string, write func(io.Writer) error) error {
	return WriteOutput(path, FileOnly, write)
}

// WriteFileAtomic writes b to path as a streamable output: a regular file
// (or a link's target) is replaced whole through a synced temporary file;
// a FIFO or terminal is written through.
func WriteFileAtomic(path string, b []byte) error {
	return WriteOutput(path, Streamable, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// CheckPaths checks the paths a Config names before anything runs, so that
// a run never fails at its end for a reason known at its start: each
// output's format (by extension), that its directory exists and takes a
// file, that it is no directory (and, for -save, no stream); that -data is
// a regular file or directory (reading a FIFO would wait forever); and
// that no output would overwrite an input or another output. -save may
// name the -resume file: continuing a run in place is what it is for.
func (c Config) CheckPaths() error {
	if c.Output.Metrics != "" && !strings.HasSuffix(c.Output.Metrics, ".csv") && !strings.HasSuffix(c.Output.Metrics, ".jsonl") {
		return fmt.Errorf("-metrics %s: want a .csv or .jsonl file", c.Output.Metrics)
	}
	if c.Output.MemReport != "" {
		if _, err := report.FormatOf(c.Output.MemReport); err != nil {
			return fmt.Errorf("-mem-report %s: want a .html, .svg or .txt file", c.Output.MemReport)
		}
	}
	if c.Data.Path != "" && !strings.ContainsAny(c.Data.Path, "*?[") {
		if fi, err := os.Stat(c.Data.Path); err == nil && !fi.IsDir() && !fi.Mode().IsRegular() {
			return fmt.Errorf("-data %s is %s: want a regular file or a directory", c.Data.Path, regularfile.Describe(fi.Mode()))
		}
	}
	if c.Output.Save != "" && c.Output.SaveFormat == "hf" {
		// A directory: it may exist (its two files are replaced), or its
		// parent must.
		if fi, err := os.Stat(c.Output.Save); err == nil && !fi.IsDir() {
			return fmt.Errorf("-save %s with -save-format hf: want a directory, and this is a file", c.Output.Save)
		} else if err != nil {
			if _, err := os.Stat(filepath.Dir(c.Output.Save)); err != nil {
				return fmt.Errorf("-save %s: %v", c.Output.Save, err)
			}
		}
	}
	outs := c.outputs()
	for _, o := range outs {
		if err := CheckOutputWritable(o.path, o.kind); err != nil {
			return fmt.Errorf("-%s %v", o.flag, err)
		}
	}
	if c.Output.Save != "" && c.Output.SaveFormat == "hf" {
		// The export's files: what it writes, and a sharded
		// checkpoint's it replaces. Checked against the inputs below.
		outs = append(outs, namedPath{flag: "save", path: c.Output.Save})
		for _, f := range hf.Touches(c.Output.Save) {
			outs = append(outs, namedPath{flag: "save", path: f})
		}
	}
	ins := c.inputs()
	for i, o := range outs {
		for _, in := range ins {
			if in.flag == "resume" && o.flag == "save" {
				continue
			}
			if samePath(o.path, in.path) {
				return fmt.Errorf("-%s %s is also the -%s input %s: it would be overwritten", o.flag, o.path, in.flag, in.path)
			}
		}
		for _, p := range outs[:i] {
			if samePath(o.path, p.path) && !(isStream(o.path) && isStream(p.path)) {
				return fmt.Errorf("-%s %s and -%s %s are the same file", p.flag, p.path, o.flag, o.path)
			}
		}
	}
	return nil
}

// HostMemReport is where a run that offloads writes the memory report of
// its host memory, beside -mem-report's of the device: the same name with
// ".host" before the extension (mem.html: mem.host.html); "" without
// -mem-report or -offload.
func (c Config) HostMemReport() string {
	if c.Output.MemReport == "" || c.Memory.Offload.Mode == "" || c.Memory.Offload.Mode == "off" {
		return ""
	}
	ext := filepath.Ext(c.Output.MemReport)
	return strings.TrimSuffix(c.Output.MemReport, ext) + ".host" + ext
}

type namedPath struct {
	flag, path string
	kind       OutputKind
}

// outputs are the files a run writes; -save writes path and path.state.
func (c Config) outputs() []namedPath {
	var o []namedPath
	if c.Output.Save != "" && c.Output.SaveFormat != "hf" {
		o = append(o, namedPath{"save", c.Output.Save, FileOnly}, namedPath{"save", c.Output.Save + ".state", FileOnly})
	}
	for _, p := range []namedPath{{"summary", c.Output.Summary, Streamable}, {"metrics", c.Output.Metrics, Streamable}, {"mem-report", c.Output.MemReport, Streamable},
		{"mem-report", c.HostMemReport(), Streamable}} {
		if p.path != "" {
			o = append(o, p)
		}
	}
	return o
}

// inputs are the files a run reads: -data (each file of a glob) and the
// -resume pair.
func (c Config) inputs() []namedPath {
	var in []namedPath
	if c.Data.Path != "" {
		files := []string{c.Data.Path}
		if strings.ContainsAny(c.Data.Path, "*?[") {
			files, _ = filepath.Glob(c.Data.Path)
		}
		for _, f := range files {
			in = append(in, dirInputs("data", f, false)...)
		}
	}
	if c.Data.Tokenizer != "" {
		in = append(in, dirInputs("tokenizer", c.Data.Tokenizer, false)...)
	}
	if c.Model.Init != "" {
		in = append(in, dirInputs("init", c.Model.Init, true)...)
	}
	if c.Output.Resume != "" {
		in = append(in, namedPath{flag: "resume", path: c.Output.Resume}, namedPath{flag: "resume", path: c.Output.Resume + ".state"})
	}
	return in
}

// dirInputs is an input path and, for a directory, every regular file
// directly in it: an output may replace none of them. With siblings, a
// file's directory counts too (a checkpoint file reads the config.json
// beside it).
func dirInputs(flag, path string, siblings bool) []namedPath {
	in := []namedPath{{flag: flag, path: path}}
	dir := path
	if fi, err := os.Stat(path); err != nil {
		return in
	} else if !fi.IsDir() {
		if !siblings {
			return in
		}
		dir = filepath.Dir(path)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return in
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			in = append(in, namedPath{flag: flag, path: filepath.Join(dir, e.Name())})
		}
	}
	return in
}

// samePath says whether a and b name one file: the same inode when both
// exist, else the same absolute path once links are followed.
func samePath(a, b string) bool {
	if fa, err := os.Stat(a); err == nil {
		fb, err := os.Stat(b)
		return err == nil && os.SameFile(fa, fb)
	}
	ra, erra := resolveLinks(a)
	rb, errb := resolveLinks(b)
	if erra != nil || errb != nil {
		return false
	}
	fa, erra := os.Stat(ra)
	fb, errb := os.Stat(rb)
	if erra == nil && errb == nil {
		return os.SameFile(fa, fb)
	}
	aa, erra := filepath.Abs(ra)
	ab, errb := filepath.Abs(rb)
	return erra == nil && errb == nil && aa == ab
}

func isStream(path string) bool {
	_, stream, err := ResolveOutput(path, Streamable)
	return err == nil && stream
}
