package main

import (
	"flag"
	"io"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/memfit/memfit/train"
)

// placeholders are the words BENCHMARKS.md's commands use for a value the
// reader picks, and a value of the kind each stands for ("": the word
// stands for flags listed beside the command, and is dropped).
var placeholders = map[string]string{"Z": "2", "B": "8", "N": "2", "SIZE": "1GiB", "FLAGS": ""}

// TestBenchmarksCommandsParse extracts every command of BENCHMARKS.md's
// code blocks that runs stepbench or train (go run ./cmd/…, a built binary,
// under mpirun, time or scripts/gpu-run.sh) and parses its arguments with
// the command's own flags: a benchmark whose command no longer parses is
// one nobody can repeat.
func TestBenchmarksCommandsParse(t *testing.T) {
	src, err := os.ReadFile("../../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	cmds := benchmarkCommands(string(src))
	seen := map[string]int{}
	for _, c := range cmds {
		seen[c.program]++
		t.Run(c.program+"/line"+strconv.Itoa(c.line), func(t *testing.T) {
			var err error
			switch c.program {
			case "stepbench":
				_, err = parseFlags(c.args, io.Discard)
			case "train":
				cfg := train.Default()
				fs := train.NewFlags("train", &cfg)
				fs.SetOutput(io.Discard)
				if err = fs.Parse(c.args); err == nil && fs.NArg() > 0 {
					t.Errorf("BENCHMARKS.md:%d: train: unexpected argument %q in %q", c.line, fs.Arg(0), strings.Join(c.args, " "))
				}
			}
			if err != nil {
				t.Errorf("BENCHMARKS.md:%d: %s %s: %v", c.line, c.program, strings.Join(c.args, " "), err)
			}
		})
	}
	// The extraction itself must keep finding the commands (the file
	// holds more of each than this).
	if seen["stepbench"] < 5 || seen["train"] < 15 {
		t.Errorf("found %d stepbench and %d train commands in BENCHMARKS.md; the extraction broke", seen["stepbench"], seen["train"])
	}
	t.Logf("%d stepbench and %d train commands parse", seen["stepbench"], seen["train"])
}

// command is one invocation of stepbench or train found in the markdown.
type command struct {
	line    int // of its first line
	program string
	args    []string
}

// benchmarkCommands returns the stepbench and train commands of the code
// blocks of a markdown file: lines indented by four spaces or inside
// ``` fences, continued by a trailing backslash. Shell variables set in
// an earlier block (G="…") or by a for loop (each of its words in turn)
// are expanded; a bracketed group of flags ([-amp bf16]) counts as given,
// a bracketed description ([technique flags]) is dropped, and the
// placeholders above take a value.
func benchmarkCommands(md string) []command {
	vars := map[string][]string{}
	var out []command
	lines := strings.Split(md, "\n")
	fenced := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced && !strings.HasPrefix(l, "    ") {
			continue
		}
		start := i + 1
		for strings.HasSuffix(strings.TrimRight(l, " "), `\`) && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(strings.TrimRight(l, " "), `\`) + " " + lines[i]
		}
		out = append(out, shellCommands(start, l, vars)...)
	}
	return out
}

var (
	assignRE  = regexp.MustCompile(`^([A-Za-z_]\w*)=(.*)$`)
	forRE     = regexp.MustCompile(`^for ([A-Za-z_]\w*) in (.*)$`)
	bracketRE = regexp.MustCompile(`\[([^\[\]]*)\]`)
)

// shellCommands splits one logical line into simple commands and keeps
// those that run stepbench or train.
func shellCommands(line int, text string, vars map[string][]string) []command {
	if i := strings.Index(text, " #"); i >= 0 {
		text = text[:i]
	}
	for bracketRE.MatchString(text) { // innermost groups first
		text = bracketRE.ReplaceAllStringFunc(text, func(m string) string {
			inner := strings.TrimSpace(m[1 : len(m)-1])
			if strings.HasPrefix(inner, "-") {
				return inner
			}
			return ""
		})
	}
	var out []command
	for _, part := range regexp.MustCompile(`;|&&|\|\|?`).Split(text, -1) {
		part = strings.TrimSpace(part)
		for _, kw := range []string{"do ", "then "} {
			part = strings.TrimPrefix(part, kw)
		}
		if m := forRE.FindStringSubmatch(part); m != nil {
			vars[m[1]] = strings.Fields(m[2])
			continue
		}
		words := shellWords(part)
		if len(words) == 1 {
			if m := assignRE.FindStringSubmatch(words[0]); m != nil {
				vars[m[1]] = []string{m[2]}
				continue
			}
		}
		for _, w := range expand(words, vars) {
			if c, ok := invocation(w); ok {
				c.line = line
				out = append(out, c)
			}
		}
	}
	return out
}

// shellWords splits like a shell: on blanks outside quotes, quotes removed.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	in, quote, has := false, byte(0), false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '"' || c == '\'':
			quote, has = c, true
		case c == ' ' || c == '\t':
			if in || has {
				words = append(words, cur.String())
				cur.Reset()
			}
			in, has = false, false
			continue
		default:
			cur.WriteByte(c)
		}
		in = true
	}
	if in || has {
		words = append(words, cur.String())
	}
	return words
}

var varRE = regexp.MustCompile(`\$\{?([A-Za-z_]\w*)\}?`)

// expand substitutes variables (a word that is all one variable splits
// into its value's words) and placeholders, once per value of each loop
// variable used.
func expand(words []string, vars map[string][]string) [][]string {
	out := [][]string{nil}
	for _, w := range words {
		m := varRE.FindStringSubmatch(w)
		if m == nil {
			if v, ok := placeholders[w]; ok {
				if w = v; v == "" {
					continue
				}
			}
			for i := range out {
				out[i] = append(out[i], w)
			}
			continue
		}
		vals, ok := vars[m[1]]
		if !ok {
			vals = []string{""}
		}
		var next [][]string
		for _, o := range out {
			for _, v := range vals {
				if w == m[0] {
					next = append(next, append(slices.Clone(o), shellWords(v)...))
				} else {
					next = append(next, append(slices.Clone(o), strings.Replace(w, m[0], v, 1)))
				}
			}
		}
		out = next
	}
	return out
}

// invocation recognises a command that runs stepbench or train, after the
// wrappers the benchmarks use (a label such as "GPT:", variable
// assignments, env, time, scripts/gpu-run.sh, mpirun and its options).
func invocation(words []string) (command, bool) {
	for len(words) > 0 {
		w := words[0]
		switch {
		case strings.HasSuffix(w, ":") || assignRE.MatchString(w):
			words = words[1:]
		case w == "env" || w == "time" || path.Base(w) == "time" || path.Base(w) == "gpu-run.sh":
			words = words[1:]
			if path.Base(w) == "gpu-run.sh" && len(words) > 0 && words[0] == "exec" {
				words = words[1:]
			}
			for len(words) > 0 && strings.HasPrefix(words[0], "-") {
				if words[0] == "-u" {
					words = words[1:]
				}
				words = words[1:]
			}
		case w == "mpirun":
			words = words[1:]
			for len(words) > 0 && strings.HasPrefix(words[0], "-") {
				words = words[2:]
			}
		case w == "go" && len(words) > 2 && words[1] == "run":
			words = words[2:]
			for len(words) > 0 && strings.HasPrefix(words[0], "-") { // go run's own flags
				words = words[1:]
			}
			switch strings.TrimSuffix(words[0], "/") {
			case "./cmd/stepbench":
				return command{program: "stepbench", args: words[1:]}, true
			case "./cmd/train":
				return command{program: "train", args: words[1:]}, true
			}
			return command{}, false
		default:
			base := path.Base(w)
			switch {
			case strings.HasPrefix(base, "stepbench"):
				return command{program: "stepbench", args: words[1:]}, true
			case base == "train" || base == "memfit-train" || strings.HasPrefix(base, "train-"):
				return command{program: "train", args: words[1:]}, true
			}
			return command{}, false
		}
	}
	return command{}, false
}

// TestFlagsRefuse checks stepbench's own validation of its flags.
func TestFlagsRefuse(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-configs", "gpt_nope"}, `unknown configuration "gpt_nope"`},
		{[]string{"-configs", ""}, "no configuration"},
		{[]string{"-without", "softmax,nope"}, `unknown capability "nope"`},
		{[]string{"-compare", "nope"}, `unknown capability "nope"`},
		{[]string{"-steps", "0"}, "-steps 0"},
		{[]string{"-with", "-layers x"}, `invalid value "x" for flag -layers`},
		{[]string{"-with", "extra"}, `unexpected argument "extra"`},
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
		{[]string{"gpt_fp32"}, `unexpected argument "gpt_fp32"`},
	} {
		_, err := parseFlags(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("stepbench %q: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	if _, err := parseFlags([]string{"-h"}, io.Discard); err != flag.ErrHelp {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	o, err := parseFlags([]string{"-configs", "gpt_bf16", "-with", "-layers 2 -context 64"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c := o.workloads["gpt_bf16"]; c.Model.Layers != 2 || c.Model.Context != 64 || c.Model.Width != 384 || c.Precision.AMP != "bf16" {
		t.Errorf("-with: layers %d context %d width %d amp %q, want 2, 64, the workload's 384 and bf16", c.Model.Layers, c.Model.Context, c.Model.Width, c.Precision.AMP)
	}
}

// TestBenchmarkCommandsExtraction pins the extraction on the shapes the
// file uses.
func TestBenchmarkCommandsExtraction(t *testing.T) {
	md := "text\n\n" +
		"    go run ./cmd/stepbench -configs gpt_bf16 -steps 4   # a comment\n" +
		"    G=\"-model gpt -layers 4 -quiet\"\n" +
		"    mpirun -np 2 -x GOMAXPROCS=1 /tmp/train-mpi $G -zero Z -batch B [-checkpoint every] -summary s.json\n" +
		"    for r in 1 2; do for c in gpt_bf16 gpt_fp32; do for b in old new; do\n" +
		"        /tmp/stepbench-$b -configs $c -warmup 1; done; done; done\n" +
		"    GPT:  /tmp/memfit-train -model gpt \\\n" +
		"              -data x [-amp bf16 [-accum 2]] [technique flags] FLAGS\n" +
		"    go build -tags cuda -o bin/stepbench ./cmd/stepbench\n" +
		"    scripts/gpu-run.sh bin/stepbench -device cuda\n" +
		"    scripts/gpu-run.sh exec bin/stepbench -device cuda -kernels\n" +
		"```\ngo run ./cmd/train -plan\n```\n"
	var got []string
	for _, c := range benchmarkCommands(md) {
		got = append(got, strconv.Itoa(c.line)+" "+c.program+" "+strings.Join(c.args, " "))
	}
	want := []string{
		"3 stepbench -configs gpt_bf16 -steps 4",
		"5 train -model gpt -layers 4 -quiet -zero 2 -batch 8 -checkpoint every -summary s.json",
		"7 stepbench -configs gpt_bf16 -warmup 1",
		"7 stepbench -configs gpt_fp32 -warmup 1",
		"7 stepbench -configs gpt_bf16 -warmup 1",
		"7 stepbench -configs gpt_fp32 -warmup 1",
		"8 train -model gpt -data x -amp bf16 -accum 2",
		"11 stepbench -device cuda",
		"12 stepbench -device cuda -kernels",
		"14 train -plan",
	}
	if !slices.Equal(got, want) {
		t.Errorf("extracted\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
