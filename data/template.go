package data

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
)

// The chat template engine: Jinja as transformers runs a chat_template
// (an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
// loopcontrols and no loader), over github.com/ardanlabs/jinja's values,
// in a sandbox of limits, since a template comes with a downloaded model
// and runs over every record. The library's own evaluator offers no hook
// for any limit (it recurses without bound, wraps integers, panics on a
// negative string repetition and builds whatever a template asks), so
// this package lexes, parses and evaluates templates itself; the library
// provides the values (jinja.Value) templates and their callers exchange.
// Renderings are Python Jinja's (TestTemplateSemantics' were checked
// against Jinja 3.1.6; the fixtures' against @huggingface/jinja), with
// its errors: integer division or modulo by zero, an integer overflow
// (Python's integers do not overflow; these are 64 bits), an attribute of
// an undefined value, iterating none, adding a string to a non-string,
// changing a list or a dict (but a namespace()'s attributes); a tuple is
// a list.
//
// The limits, each an error naming the limit (never a panic, a hang or an
// exhausted memory):
//
//   - The source: at most tplMaxSource bytes, and nested at most
//     tplMaxNesting deep (blocks within blocks, and the expressions within
//     them: brackets, operators and filters counted as the tree they
//     build). The parser checks the depth as it goes, so neither it nor
//     the evaluator, whose recursion follows the tree, recurses deeper.
//   - Calls: macros, call blocks' caller() and recursive loops nest at
//     most tplMaxCalls deep (so does |map('map', ...)); values (lists and
//     dicts within each other, a namespace holding itself) are printed,
//     compared or serialised at most tplMaxValueDepth deep.
//   - Steps: every node run, expression evaluated, loop iteration, call,
//     filter, test and output write costs one, as does every item a
//     range, a repetition or a conversion builds and every value printed
//     or compared; a rendering has tplLimits.Steps.
//   - Bytes: every byte a string operation builds or scans (concatenation,
//     repetition, replace, join, formatting, slicing, tojson, the
//     rendering itself) and tplItemBytes per list item built count against
//     tplLimits.Bytes, checked before the allocation.
//   - Output: the rendering, and any one string, at most tplLimits.Output
//     bytes, checked before the allocation.
//
// Steps, bytes and output are a constant plus so much per byte of the
// variables (the conversation), the output capped absolutely
// (tplDefaultLimits). `range` and `*` build what Python would within the
// limits; slices are Python's, any step but zero.

const (
	// tplMaxSource is the largest template source: real chat templates
	// are a few KiB (the largest, with tool-use instructions, tens).
	tplMaxSource = 1 << 20
	// tplMaxNesting is how deep blocks and expressions may nest, together:
	// real templates nest blocks 6 deep and expressions about 10.
	tplMaxNesting = 256
	// tplMaxCalls is how deep macros, caller() and recursive loops may
	// call each other (Python's recursion limit stops Jinja's at about
	// 100 to 300).
	tplMaxCalls = 100
	// tplMaxValueDepth is how deep nested values are walked.
	tplMaxValueDepth = 512
)

// tplLimits are a rendering's budgets.
type tplLimits struct {
	Steps  int64 // nodes, expressions, iterations, calls, filters, writes
	Bytes  int64 // bytes built or scanned by string and list operations
	Output int64 // bytes of the rendering and of any one string
}

// Defaults of tplDefaultLimits: a constant plus so much per byte of input
// (the variables' strings, and tplItemBytes per value). The real
// templates (the fixtures', over their conversations and one of 400
// turns: TestTemplateBudgetOfRealTemplates) take under 1 step, 4 bytes
// of work and 100 steps a message, and write at most 3.2 times their
// input (a preamble over a short conversation): the constants alone
// cover thousands of messages, and the rates are 16 to 27 times what
// they need. A hostile template over a small conversation ends within a
// million steps (under a second), 64 MiB of work and a MiB of output.
const (
	tplBaseSteps     = 1 << 20
	tplStepsPerByte  = 16
	tplBaseBytes     = 64 << 20
	tplBytesPerByte  = 64
	tplBaseOutput    = 1 << 20
	tplOutputPerByte = 8
	tplMaxOutput     = 256 << 20
	tplItemBytes     = 24 // what a list item (a jinja.Value) takes
)

// tplDefaultLimits are the budgets of a rendering of variables of
// inputBytes (tplValueSize).
func tplDefaultLimits(inputBytes int64) tplLimits {
	inputBytes = min(max(inputBytes, 0), 1<<40)
	return tplLimits{
		Steps:  tplBaseSteps + tplStepsPerByte*inputBytes,
		Bytes:  tplBaseBytes + tplBytesPerByte*inputBytes,
		Output: min(tplBaseOutput+tplOutputPerByte*inputBytes, tplMaxOutput),
	}
}

// tplValueSize is what vars weigh against the limits: the bytes of their
// strings and tplItemBytes a value, walked to a bounded depth (deeper
// values, which JSON records cannot hold, count as one).
func tplValueSize(vars map[string]jinja.Value) int64 {
	var n int64
	for k, v := range vars {
		n += int64(len(k)) + tplValueBytes(v, 0)
	}
	return n
}

func tplValueBytes(v jinja.Value, depth int) int64 {
	n := int64(tplItemBytes)
	if depth > 10000 {
		return n
	}
	switch {
	case v.IsString():
		n += int64(len(v.AsString()))
	case v.IsList():
		for _, it := range v.AsList().Items {
			n += tplValueBytes(it, depth+1)
		}
	case v.IsDict():
		d := v.AsDict()
		for _, k := range d.Keys {
			n += int64(len(k)) + tplValueBytes(d.Data[k], depth+1)
		}
	}
	return n
}

// tplError is an error of a template: the line of its source, and what.
type tplError struct {
	line int
	msg  string
}

func (e *tplError) Error() string {
	if e.line > 0 {
		return fmt.Sprintf("line %d: %s", e.line, e.msg)
	}
	return e.msg
}

// tplTemplate is a compiled template.
type tplTemplate struct {
	body []tplNode
}

// tplCompile lexes and parses source.
func tplCompile(source string) (*tplTemplate, error) {
	if len(source) > tplMaxSource {
		return nil, &tplError{msg: fmt.Sprintf("the template is %d bytes, more than the limit of %d", len(source), tplMaxSource)}
	}
	toks, err := tplLex(source)
	if err != nil {
		return nil, err
	}
	p := &tplParser{toks: toks}
	body, err := p.parseTemplate()
	if err != nil {
		return nil, err
	}
	return &tplTemplate{body: body}, nil
}

// render runs the template over vars within lim.
func (t *tplTemplate) render(vars map[string]jinja.Value, lim tplLimits) (string, error) {
	out, _, err := t.run(vars, lim)
	return out, err
}

// run is render that also returns how much of each limit the rendering
// used. A panic (of a callable vars holds, or a bug) is an error.
func (t *tplTemplate) run(vars map[string]jinja.Value, lim tplLimits) (out string, used tplLimits, err error) {
	r := &tplRenderer{lim: lim, steps: lim.Steps, work: lim.Bytes, vars: vars}
	defer func() {
		used = tplLimits{Steps: lim.Steps - max(r.steps, 0), Bytes: lim.Bytes - max(r.work, 0), Output: int64(len(out))}
	}()
	defer func() {
		if p := recover(); p != nil {
			out, err = "", &tplError{line: r.line, msg: fmt.Sprintf("internal error of the template engine (a bug in memfit, not in the template): %.200v", p)}
		}
	}()
	var b strings.Builder
	r.out, r.top = &b, &b
	if err := r.execBody(t.body, &tplScope{vars: map[string]jinja.Value{}}); err != nil {
		if errors.Is(err, errTplBreak) || errors.Is(err, errTplContinue) {
			err = &tplError{line: r.line, msg: "break or continue outside a loop"}
		}
		return "", used, err
	}
	return b.String(), used, nil
}
