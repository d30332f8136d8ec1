package data

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

var (
	errTplBreak    = errors.New("break")
	errTplContinue = errors.New("continue")
)

// tplScope holds the variables a block sets; a for loop's body, a macro's
// and a caller's have their own, whose parent is where they were defined.
type tplScope struct {
	vars   map[string]jinja.Value
	parent *tplScope
}

func (s *tplScope) set(name string, v jinja.Value) {
	if s.vars == nil {
		s.vars = make(map[string]jinja.Value, 4)
	}
	s.vars[name] = v
}

// tplRenderer runs a template within its limits.
type tplRenderer struct {
	lim   tplLimits
	steps int64 // left
	work  int64 // bytes left
	vars  map[string]jinja.Value
	out   *strings.Builder // where output goes (a macro's, a set block's)
	top   *strings.Builder // the rendering's
	calls int              // macro, caller and recursive loop calls deep
	maps  int              // |map('map', ...) deep
	line  int              // of the statement running, for errors
	// namespaces are the dicts namespace() made, the only ones whose
	// attributes a template may set (as Jinja's sandbox).
	namespaces map[*jinja.Dict]bool
}

func (r *tplRenderer) errf(format string, args ...any) error {
	return &tplError{line: r.line, msg: fmt.Sprintf(format, args...)}
}

// step charges one step.
func (r *tplRenderer) step() error {
	r.steps--
	if r.steps < 0 {
		return r.stepsErr()
	}
	return nil
}

func (r *tplRenderer) stepsErr() error {
	r.steps = -1
	return r.errf("the template runs more than %d steps (its limit for this conversation; a loop or recursion without end?)", r.lim.Steps)
}

// spend charges n bytes of work.
func (r *tplRenderer) spend(n int64) error {
	if n < 0 || n > r.work {
		r.work = -1
		return r.errf("the template builds or scans more than %d bytes of strings and lists (its limit for this conversation)", r.lim.Bytes)
	}
	r.work -= n
	return nil
}

func (r *tplRenderer) tooLong(n int64) error {
	return r.errf("the template builds a string of %d bytes or more, over the limit of %d for this conversation", n, r.lim.Output)
}

// newString checks and charges a string of n bytes about to be built.
func (r *tplRenderer) newString(n int64) error {
	if n > r.lim.Output || n < 0 {
		return r.tooLong(n)
	}
	return r.spend(n)
}

// newItems checks and charges a list of n items about to be built: a
// step and tplItemBytes bytes each.
func (r *tplRenderer) newItems(n int64) error {
	if n < 0 || n > r.steps {
		return r.errf("the template builds a list of %d items, more than the %d steps it has left (its limit for this conversation)", n, max(r.steps, 0))
	}
	r.steps -= n
	if n > r.work/tplItemBytes {
		return r.spend(r.work + 1)
	}
	return r.spend(n * tplItemBytes)
}

// write appends s to the output.
func (r *tplRenderer) write(s string) error {
	if err := r.step(); err != nil {
		return err
	}
	if int64(r.out.Len())+int64(len(s)) > r.lim.Output {
		if r.out == r.top {
			return r.errf("the rendering is more than %d bytes (its limit for this conversation)", r.lim.Output)
		}
		return r.tooLong(int64(r.out.Len()) + int64(len(s)))
	}
	if err := r.spend(int64(len(s))); err != nil {
		return err
	}
	r.out.WriteString(s)
	return nil
}

// capture runs body in sc and returns what it writes.
func (r *tplRenderer) capture(body []tplNode, sc *tplScope) (string, error) {
	saved := r.out
	var b strings.Builder
	r.out = &b
	err := r.execBody(body, sc)
	r.out = saved
	return b.String(), err
}

// enterCall goes one call deeper.
func (r *tplRenderer) enterCall() error {
	if r.calls >= tplMaxCalls {
		return r.errf("macros, caller() or recursive loops call each other more than %d deep (the limit; a recursion without end?)", tplMaxCalls)
	}
	r.calls++
	return nil
}

func (r *tplRenderer) execBody(body []tplNode, sc *tplScope) error {
	for _, n := range body {
		if err := r.exec(n, sc); err != nil {
			return err
		}
	}
	return nil
}

func (r *tplRenderer) exec(n tplNode, sc *tplScope) error {
	if err := r.step(); err != nil {
		return err
	}
	switch n := n.(type) {
	case *tplText:
		return r.write(n.text)
	case *tplOutput:
		r.line = n.line
		v, err := r.eval(n.x, sc)
		if err != nil {
			return err
		}
		s, err := r.str(v)
		if err != nil {
			return err
		}
		return r.write(s)
	case *tplIf:
		r.line = n.line
		for i, c := range n.conds {
			v, err := r.eval(c, sc)
			if err != nil {
				return err
			}
			if tplTruthy(v) {
				return r.execBody(n.bodies[i], sc)
			}
		}
		return r.execBody(n.els, sc)
	case *tplFor:
		r.line = n.line
		it, err := r.eval(n.iter, sc)
		if err != nil {
			return err
		}
		return r.loop(n, sc, it, 0)
	case *tplSet:
		r.line = n.line
		v, err := r.eval(n.x, sc)
		if err != nil {
			return err
		}
		return r.assign(sc, n.targets, n.ns, n.attr, v)
	case *tplSetBlock:
		r.line = n.line
		s, err := r.capture(n.body, sc)
		if err != nil {
			return err
		}
		v := jinja.NewString(s)
		for _, f := range n.filters {
			if v, err = r.applyFilter(f, v, sc); err != nil {
				return err
			}
		}
		var targets []string
		if n.target != "" {
			targets = []string{n.target}
		}
		return r.assign(sc, targets, n.ns, n.attr, v)
	case *tplMacro:
		sc.set(n.name, r.macro(n, sc))
		return nil
	case *tplCallBlock:
		r.line = n.line
		return r.callBlock(n, sc)
	case *tplFilterBlock:
		r.line = n.line
		s, err := r.capture(n.body, sc)
		if err != nil {
			return err
		}
		v := jinja.NewString(s)
		for _, f := range n.filters {
			if v, err = r.applyFilter(f, v, sc); err != nil {
				return err
			}
		}
		if s, err = r.str(v); err != nil {
			return err
		}
		return r.write(s)
	case *tplGroup:
		return r.execBody(n.body, sc)
	case *tplBreak:
		return errTplBreak
	case *tplContinue:
		return errTplContinue
	}
	return r.errf("internal error: statement %T", n)
}

// assign sets targets (unpacking v into several) or namespace ns's attr.
func (r *tplRenderer) assign(sc *tplScope, targets []string, ns, attr string, v jinja.Value) error {
	if ns != "" {
		n := r.lookup(ns, sc)
		if !n.IsDict() || !r.namespaces[n.AsDict()] {
			return r.errf("cannot set %s.%s: %s is %s, not a namespace()", ns, attr, ns, tplType(n))
		}
		if err := r.newItems(1); err != nil {
			return err
		}
		n.AsDict().Set(attr, v)
		return nil
	}
	if len(targets) == 1 {
		sc.set(targets[0], v)
		return nil
	}
	items, err := r.unpack(v, len(targets))
	if err != nil {
		return err
	}
	for i, t := range targets {
		sc.set(t, items[i])
	}
	return nil
}

// unpack splits v into n values, as Python's a, b = v.
func (r *tplRenderer) unpack(v jinja.Value, n int) ([]jinja.Value, error) {
	if !v.IsList() {
		if !v.IsString() && !v.IsDict() {
			return nil, r.errf("cannot unpack non-iterable %s object", tplType(v))
		}
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		v = jinja.NewList(items)
	}
	items := v.AsList().Items
	if len(items) != n {
		return nil, r.errf("cannot unpack %d values into %d names", len(items), n)
	}
	return items, nil
}

// lookup finds a variable: the scopes, the template's variables, the
// built-in globals; undefined when none has it.
func (r *tplRenderer) lookup(name string, sc *tplScope) jinja.Value {
	for s := sc; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v
		}
	}
	if v, ok := r.vars[name]; ok {
		return v
	}
	if g, ok := tplGlobals[name]; ok {
		return jinja.NewCallable(name, func(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
			return g(r, args, tplKwargsOf(kwargs))
		})
	}
	return jinja.Undefined()
}

// loop runs for loop n over it (depth deep in a recursive loop).
func (r *tplRenderer) loop(n *tplFor, sc *tplScope, it jinja.Value, depth int) error {
	items, err := r.iterate(it)
	if err != nil {
		return err
	}
	body := &tplScope{parent: sc}
	if n.cond != nil {
		var kept []jinja.Value
		for _, item := range items {
			if err := r.step(); err != nil {
				return err
			}
			if err := r.assign(body, n.targets, "", "", item); err != nil {
				return err
			}
			v, err := r.eval(n.cond, body)
			if err != nil {
				return err
			}
			if tplTruthy(v) {
				kept = append(kept, item)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return r.execBody(n.els, sc)
	}
	if !n.usesLoop {
		for _, item := range items {
			if err := r.step(); err != nil {
				return err
			}
			if err := r.assign(body, n.targets, "", "", item); err != nil {
				return err
			}
			err := r.execBody(n.body, body)
			switch {
			case err == errTplBreak:
				return nil
			case err == errTplContinue:
			case err != nil:
				return err
			}
		}
		return nil
	}
	total := int64(len(items))
	loop := jinja.NewDict()
	ld := loop.AsDict()
	index := 0
	ld.Set("length", jinja.NewInt(total))
	ld.Set("depth", jinja.NewInt(int64(depth+1)))
	ld.Set("depth0", jinja.NewInt(int64(depth)))
	ld.Set("cycle", jinja.NewCallable("loop.cycle", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) == 0 {
			return jinja.Undefined(), r.errf("loop.cycle() needs at least one value")
		}
		return args[index%len(args)], nil
	}))
	if n.recursive {
		ld.Set("__call__", jinja.NewCallable("loop", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			if len(args) != 1 {
				return jinja.Undefined(), r.errf("loop() takes one argument, the items to loop over")
			}
			if err := r.enterCall(); err != nil {
				return jinja.Undefined(), err
			}
			defer func() { r.calls-- }()
			s, err := r.capture([]tplNode{&tplFor{targets: n.targets, iter: &tplLit{v: args[0]}, cond: n.cond, body: n.body, recursive: true, usesLoop: true, line: n.line}}, sc)
			return jinja.NewString(s), err
		}))
	}
	body.set("loop", loop)
	for i, item := range items {
		if err := r.step(); err != nil {
			return err
		}
		index = i
		if err := r.assign(body, n.targets, "", "", item); err != nil {
			return err
		}
		k := int64(i)
		ld.Data["index"] = jinja.NewInt(k + 1)
		ld.Data["index0"] = jinja.NewInt(k)
		ld.Data["revindex"] = jinja.NewInt(total - k)
		ld.Data["revindex0"] = jinja.NewInt(total - k - 1)
		ld.Data["first"] = jinja.NewBool(i == 0)
		ld.Data["last"] = jinja.NewBool(i == len(items)-1)
		if i > 0 {
			ld.Data["previtem"] = items[i-1]
		} else {
			ld.Data["previtem"] = jinja.Undefined()
		}
		if i+1 < len(items) {
			ld.Data["nextitem"] = items[i+1]
		} else {
			ld.Data["nextitem"] = jinja.Undefined()
		}
		err := r.execBody(n.body, body)
		switch {
		case err == errTplBreak:
			return nil
		case err == errTplContinue:
		case err != nil:
			return err
		}
	}
	return nil
}

// iterate returns the items of v: a list's, a dict's keys, a string's
// characters; none (and undefined) have none.
func (r *tplRenderer) iterate(v jinja.Value) ([]jinja.Value, error) {
	switch {
	case v.IsList():
		return v.AsList().Items, nil
	case v.IsDict():
		keys := v.AsDict().Keys
		if err := r.newItems(int64(len(keys))); err != nil {
			return nil, err
		}
		items := make([]jinja.Value, len(keys))
		for i, k := range keys {
			items[i] = jinja.NewString(k)
		}
		return items, nil
	case v.IsString():
		s := v.AsString()
		n := utf8.RuneCountInString(s)
		if err := r.newItems(int64(n)); err != nil {
			return nil, err
		}
		if err := r.spend(int64(len(s))); err != nil {
			return nil, err
		}
		items := make([]jinja.Value, 0, n)
		for _, c := range s {
			items = append(items, jinja.NewString(string(c)))
		}
		return items, nil
	case v.IsUndefined():
		return nil, nil
	}
	return nil, r.errf("'%s' object is not iterable", tplType(v))
}

// macro returns the callable of macro n defined in sc.
func (r *tplRenderer) macro(n *tplMacro, sc *tplScope) jinja.Value {
	return jinja.NewCallable(n.name, func(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
		if err := r.enterCall(); err != nil {
			return jinja.Undefined(), err
		}
		line := r.line
		defer func() { r.calls--; r.line = line }()
		call := &tplScope{parent: sc}
		if err := r.bindParams(call, n.name, n.params, args, kwargs, true); err != nil {
			return jinja.Undefined(), err
		}
		if c, ok := kwargs["caller"]; ok {
			call.set("caller", c)
		}
		s, err := r.capture(n.body, call)
		return jinja.NewString(s), err
	})
}

// bindParams binds a macro's or caller's parameters in sc; what no
// parameter takes goes to varargs and kwargs.
func (r *tplRenderer) bindParams(sc *tplScope, name string, params []tplParam, args []jinja.Value, kwargs map[string]jinja.Value, macro bool) error {
	used := 0
	for i, p := range params {
		switch v, ok := kwargs[p.name]; {
		case i < len(args):
			sc.set(p.name, args[i])
		case ok:
			sc.set(p.name, v)
			used++
		case p.def != nil:
			v, err := r.eval(p.def, sc)
			if err != nil {
				return err
			}
			sc.set(p.name, v)
		default:
			sc.set(p.name, jinja.Undefined())
		}
	}
	if !macro {
		return nil
	}
	var extra []jinja.Value
	if len(args) > len(params) {
		extra = args[len(params):]
	}
	sc.set("varargs", jinja.NewList(extra))
	kw := jinja.NewDict()
	if used < len(kwargs) {
		names := make([]string, 0, len(kwargs))
		for k := range kwargs {
			if k != "caller" && !tplHasParam(params, k) {
				names = append(names, k)
			}
		}
		slices.Sort(names)
		for _, k := range names {
			kw.AsDict().Set(k, kwargs[k])
		}
	}
	sc.set("kwargs", kw)
	return nil
}

func tplHasParam(params []tplParam, name string) bool {
	for _, p := range params {
		if p.name == name {
			return true
		}
	}
	return false
}

// callBlock runs {% call %}: the macro called with a caller that renders
// the block's body.
func (r *tplRenderer) callBlock(n *tplCallBlock, sc *tplScope) error {
	caller := jinja.NewCallable("caller", func(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
		if err := r.enterCall(); err != nil {
			return jinja.Undefined(), err
		}
		line := r.line
		defer func() { r.calls--; r.line = line }()
		call := &tplScope{parent: sc}
		if err := r.bindParams(call, "caller", n.params, args, kwargs, false); err != nil {
			return jinja.Undefined(), err
		}
		s, err := r.capture(n.body, call)
		return jinja.NewString(s), err
	})
	fn, err := r.eval(n.call.fn, sc)
	if err != nil {
		return err
	}
	args, kwargs, err := r.evalArgs(n.call.args, n.call.kwargs, sc)
	if err != nil {
		return err
	}
	kw := tplKwargsMap(kwargs)
	kw["caller"] = caller
	v, err := r.invoke(fn, tplCallee(n.call.fn), args, kw)
	if err != nil {
		return err
	}
	s, err := r.str(v)
	if err != nil {
		return err
	}
	return r.write(s)
}

// tplKV is a keyword argument's value, in the order of the call.
type tplKV struct {
	name string
	v    jinja.Value
}

func tplKwargsMap(kw []tplKV) map[string]jinja.Value {
	m := make(map[string]jinja.Value, len(kw)+1)
	for _, a := range kw {
		m[a.name] = a.v
	}
	return m
}

func tplKwargsOf(m map[string]jinja.Value) []tplKV {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	kw := make([]tplKV, len(names))
	for i, k := range names {
		kw[i] = tplKV{k, m[k]}
	}
	return kw
}

func (r *tplRenderer) evalArgs(argx []tplExpr, kwx []tplKwarg, sc *tplScope) ([]jinja.Value, []tplKV, error) {
	var args []jinja.Value
	if len(argx) > 0 {
		args = make([]jinja.Value, len(argx))
		for i, a := range argx {
			v, err := r.eval(a, sc)
			if err != nil {
				return nil, nil, err
			}
			args[i] = v
		}
	}
	var kwargs []tplKV
	for _, k := range kwx {
		v, err := r.eval(k.x, sc)
		if err != nil {
			return nil, nil, err
		}
		kwargs = append(kwargs, tplKV{k.name, v})
	}
	return args, kwargs, nil
}

// tplCallee names what a call calls (or an expression), for messages.
func tplCallee(x tplExpr) string {
	switch x := x.(type) {
	case *tplName:
		return x.name
	case *tplAttr:
		return tplCallee(x.x) + "." + x.name
	case *tplItem:
		return tplCallee(x.x) + "[...]"
	case *tplCall:
		return tplCallee(x.fn) + "(...)"
	case *tplFilter:
		return tplCallee(x.x) + "|" + x.name
	}
	return "the expression"
}

// undefinedErr says that x, undefined, has no what (an attribute or an
// item), as Python's Jinja raises.
func (r *tplRenderer) undefinedErr(x tplExpr, what string) error {
	return r.errf("%s is undefined, and so has no %s", tplClip(tplCallee(x), 80), tplClip(what, 40))
}

// invoke calls fn.
func (r *tplRenderer) invoke(fn jinja.Value, name string, args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if err := r.step(); err != nil {
		return jinja.Undefined(), err
	}
	if fn.IsDict() {
		if c, ok := fn.AsDict().Get("__call__"); ok {
			fn = c
		}
	}
	switch {
	case fn.IsCallable():
		v, err := fn.AsCallable().Fn(args, kwargs)
		if err != nil {
			var te *tplError
			if !errors.As(err, &te) {
				err = r.errf("%s: %v", name, err)
			}
		}
		return v, err
	case fn.IsUndefined():
		return jinja.Undefined(), r.errf("%s is undefined, and so cannot be called", tplClip(name, 80))
	}
	return jinja.Undefined(), r.errf("%s is %s, which cannot be called", tplClip(name, 80), tplType(fn))
}

// str is Python's str of v, within the limits.
func (r *tplRenderer) str(v jinja.Value) (string, error) {
	if !v.IsList() && !v.IsDict() {
		return tplScalarStr(v), nil
	}
	b := &tplBuf{r: r}
	b.repr(v, 0)
	return b.done()
}

func (r *tplRenderer) eval(x tplExpr, sc *tplScope) (jinja.Value, error) {
	if err := r.step(); err != nil {
		return jinja.Undefined(), err
	}
	undef := jinja.Undefined()
	switch x := x.(type) {
	case *tplLit:
		return x.v, nil
	case *tplName:
		return r.lookup(x.name, sc), nil
	case *tplAttr:
		obj, err := r.eval(x.x, sc)
		if err != nil {
			return undef, err
		}
		if obj.IsUndefined() {
			return undef, r.undefinedErr(x.x, "."+x.name)
		}
		if obj.IsDict() {
			if v, ok := obj.AsDict().Get(x.name); ok {
				return v, nil
			}
		}
		return undef, nil
	case *tplItem:
		obj, err := r.eval(x.x, sc)
		if err != nil {
			return undef, err
		}
		if obj.IsUndefined() {
			return undef, r.undefinedErr(x.x, "[...]")
		}
		key, err := r.eval(x.key, sc)
		if err != nil {
			return undef, err
		}
		return r.item(obj, key)
	case *tplSlice:
		return r.evalSlice(x, sc)
	case *tplUnary:
		v, err := r.eval(x.x, sc)
		if err != nil {
			return undef, err
		}
		return r.unary(x.op, v)
	case *tplBin:
		l, err := r.eval(x.l, sc)
		if err != nil {
			return undef, err
		}
		switch x.op {
		case "and":
			if !tplTruthy(l) {
				return l, nil
			}
			return r.eval(x.r, sc)
		case "or":
			if tplTruthy(l) {
				return l, nil
			}
			return r.eval(x.r, sc)
		}
		rv, err := r.eval(x.r, sc)
		if err != nil {
			return undef, err
		}
		if x.op == "%" && l.IsString() {
			t, ok := x.r.(*tplList)
			return r.percentFormat(l.AsString(), rv, ok && t.tuple)
		}
		return r.arith(x.op, l, rv)
	case *tplConcat:
		parts := make([]string, len(x.parts))
		n := int64(0)
		for i, p := range x.parts {
			v, err := r.eval(p, sc)
			if err != nil {
				return undef, err
			}
			if parts[i], err = r.str(v); err != nil {
				return undef, err
			}
			n += int64(len(parts[i]))
		}
		if err := r.newString(n); err != nil {
			return undef, err
		}
		return jinja.NewString(strings.Join(parts, "")), nil
	case *tplCompare:
		l, err := r.eval(x.first, sc)
		if err != nil {
			return undef, err
		}
		for i, op := range x.ops {
			rv, err := r.eval(x.rest[i], sc)
			if err != nil {
				return undef, err
			}
			ok, err := r.compareOp(op, l, rv)
			if err != nil || !ok {
				return jinja.NewBool(false), err
			}
			l = rv
		}
		return jinja.NewBool(true), nil
	case *tplCond:
		c, err := r.eval(x.cond, sc)
		if err != nil {
			return undef, err
		}
		if tplTruthy(c) {
			return r.eval(x.yes, sc)
		}
		if x.no == nil {
			return undef, nil
		}
		return r.eval(x.no, sc)
	case *tplCall:
		return r.evalCall(x, sc)
	case *tplFilter:
		v, err := r.eval(x.x, sc)
		if err != nil {
			return undef, err
		}
		return r.applyFilter(x, v, sc)
	case *tplTest:
		v, err := r.eval(x.x, sc)
		if err != nil {
			return undef, err
		}
		args, _, err := r.evalArgs(x.args, nil, sc)
		if err != nil {
			return undef, err
		}
		ok, err := r.test(x.name, v, args)
		if err != nil {
			return undef, err
		}
		return jinja.NewBool(ok != x.neg), nil
	case *tplList:
		if err := r.newItems(int64(len(x.items))); err != nil {
			return undef, err
		}
		items := make([]jinja.Value, len(x.items))
		for i, it := range x.items {
			v, err := r.eval(it, sc)
			if err != nil {
				return undef, err
			}
			items[i] = v
		}
		return jinja.NewList(items), nil
	case *tplDict:
		if err := r.newItems(int64(len(x.keys))); err != nil {
			return undef, err
		}
		d := jinja.NewDict()
		for i, k := range x.keys {
			kv, err := r.eval(k, sc)
			if err != nil {
				return undef, err
			}
			v, err := r.eval(x.vals[i], sc)
			if err != nil {
				return undef, err
			}
			ks, err := r.str(kv)
			if err != nil {
				return undef, err
			}
			d.AsDict().Set(ks, v)
		}
		return d, nil
	}
	return undef, r.errf("internal error: expression %T", x)
}

// evalCall calls a function, a macro or a method.
func (r *tplRenderer) evalCall(c *tplCall, sc *tplScope) (jinja.Value, error) {
	undef := jinja.Undefined()
	if a, ok := c.fn.(*tplAttr); ok {
		obj, err := r.eval(a.x, sc)
		if err != nil {
			return undef, err
		}
		args, kwargs, err := r.evalArgs(c.args, c.kwargs, sc)
		if err != nil {
			return undef, err
		}
		if obj.IsDict() {
			if fn, ok := obj.AsDict().Get(a.name); ok {
				return r.invoke(fn, tplCallee(c.fn), args, tplKwargsMap(kwargs))
			}
		}
		if err := r.step(); err != nil {
			return undef, err
		}
		return r.method(obj, a.name, args, kwargs)
	}
	if n, ok := c.fn.(*tplName); ok {
		if g, ok := tplGlobals[n.name]; ok && !r.shadowed(n.name, sc) {
			args, kwargs, err := r.evalArgs(c.args, c.kwargs, sc)
			if err != nil {
				return undef, err
			}
			if err := r.step(); err != nil {
				return undef, err
			}
			return g(r, args, kwargs)
		}
	}
	fn, err := r.eval(c.fn, sc)
	if err != nil {
		return undef, err
	}
	args, kwargs, err := r.evalArgs(c.args, c.kwargs, sc)
	if err != nil {
		return undef, err
	}
	return r.invoke(fn, tplCallee(c.fn), args, tplKwargsMap(kwargs))
}

// shadowed says whether a scope or the variables define name.
func (r *tplRenderer) shadowed(name string, sc *tplScope) bool {
	for s := sc; s != nil; s = s.parent {
		if _, ok := s.vars[name]; ok {
			return true
		}
	}
	_, ok := r.vars[name]
	return ok
}

// item is obj[key]: a dict's value, a list's or a string's item (from
// the end where negative); undefined where there is none.
func (r *tplRenderer) item(obj, key jinja.Value) (jinja.Value, error) {
	undef := jinja.Undefined()
	switch {
	case obj.IsDict():
		k, err := r.str(key)
		if err != nil {
			return undef, err
		}
		if v, ok := obj.AsDict().Get(k); ok {
			return v, nil
		}
	case obj.IsList() && tplIsInt(key):
		items := obj.AsList().Items
		i := tplInt(key)
		if i < 0 {
			i += int64(len(items))
		}
		if i >= 0 && i < int64(len(items)) {
			return items[i], nil
		}
	case obj.IsString() && tplIsInt(key):
		s := obj.AsString()
		i := tplInt(key)
		if tplASCII(s) {
			if i < 0 {
				i += int64(len(s))
			}
			if i >= 0 && i < int64(len(s)) {
				return jinja.NewString(s[i : i+1]), nil
			}
			return undef, nil
		}
		if err := r.spend(int64(len(s))); err != nil {
			return undef, err
		}
		runes := []rune(s)
		if i < 0 {
			i += int64(len(runes))
		}
		if i >= 0 && i < int64(len(runes)) {
			return jinja.NewString(string(runes[i])), nil
		}
	}
	return undef, nil
}

// tplASCII says whether s is all ASCII (its bytes its characters).
func tplASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// tplSliceIndices is Python's slice.indices: the start, step and number
// of items of a slice of a sequence of length items (step not zero).
func tplSliceIndices(length int64, start, stop, step *int64) (from, by, count int64) {
	by = 1
	if step != nil {
		by = max(*step, -math.MaxInt64)
	}
	clamp := func(p *int64, def int64) int64 {
		if p == nil {
			return def
		}
		i := *p
		if i < 0 {
			i += length
			if i < 0 {
				if by < 0 {
					return -1
				}
				return 0
			}
		} else if i >= length {
			if by < 0 {
				return length - 1
			}
			return length
		}
		return i
	}
	if by < 0 {
		from, to := clamp(start, length-1), clamp(stop, -1)
		if to < from {
			count = (from-to-1)/(-by) + 1
		}
		return from, by, count
	}
	from, to := clamp(start, 0), clamp(stop, length)
	if from < to {
		count = (to-from-1)/by + 1
	}
	return from, by, count
}

func (r *tplRenderer) evalSlice(x *tplSlice, sc *tplScope) (jinja.Value, error) {
	undef := jinja.Undefined()
	obj, err := r.eval(x.x, sc)
	if err != nil {
		return undef, err
	}
	var idx [3]*int64
	for i, e := range []tplExpr{x.start, x.stop, x.step} {
		if e == nil {
			continue
		}
		v, err := r.eval(e, sc)
		if err != nil {
			return undef, err
		}
		switch {
		case v.IsNone() || v.IsUndefined():
		case tplIsInt(v):
			n := tplInt(v)
			idx[i] = &n
		default:
			return undef, r.errf("slice indices must be integers or none, not %s", tplType(v))
		}
	}
	if idx[2] != nil && *idx[2] == 0 {
		return undef, r.errf("slice step cannot be zero")
	}
	switch {
	case obj.IsList():
		items := obj.AsList().Items
		from, by, count := tplSliceIndices(int64(len(items)), idx[0], idx[1], idx[2])
		if err := r.newItems(count); err != nil {
			return undef, err
		}
		out := make([]jinja.Value, count)
		for i := range out {
			out[i] = items[from+int64(i)*by]
		}
		return jinja.NewList(out), nil
	case obj.IsString():
		s := obj.AsString()
		if tplASCII(s) {
			from, by, count := tplSliceIndices(int64(len(s)), idx[0], idx[1], idx[2])
			if err := r.newString(count); err != nil {
				return undef, err
			}
			if by == 1 {
				return jinja.NewString(s[from : from+count]), nil
			}
			b := make([]byte, count)
			for i := range b {
				b[i] = s[from+int64(i)*by]
			}
			return jinja.NewString(string(b)), nil
		}
		if err := r.spend(int64(len(s))); err != nil {
			return undef, err
		}
		runes := []rune(s)
		from, by, count := tplSliceIndices(int64(len(runes)), idx[0], idx[1], idx[2])
		if err := r.newString(count * 4); err != nil {
			return undef, err
		}
		out := make([]rune, count)
		for i := range out {
			out[i] = runes[from+int64(i)*by]
		}
		return jinja.NewString(string(out)), nil
	case obj.IsUndefined():
		return undef, r.undefinedErr(x.x, "slice")
	}
	return undef, r.errf("'%s' object cannot be sliced", tplType(obj))
}

func (r *tplRenderer) unary(op string, v jinja.Value) (jinja.Value, error) {
	switch {
	case op == "not":
		return jinja.NewBool(!tplTruthy(v)), nil
	case v.IsFloat():
		if op == "-" {
			return jinja.NewFloat(-v.AsFloat()), nil
		}
		return v, nil
	case tplIsInt(v):
		n := tplInt(v)
		if op == "-" {
			if n == math.MinInt64 {
				return jinja.Undefined(), r.overflow()
			}
			n = -n
		}
		return jinja.NewInt(n), nil
	}
	return jinja.Undefined(), r.errf("bad operand type for unary %s: '%s'", op, tplType(v))
}

func (r *tplRenderer) overflow() error {
	return r.errf("integer overflow (the template's integers are 64 bits)")
}

// arith applies a binary arithmetic operator.
func (r *tplRenderer) arith(op string, a, b jinja.Value) (jinja.Value, error) {
	undef := jinja.Undefined()
	typeErr := func() (jinja.Value, error) {
		return undef, r.errf("unsupported operand types for %s: '%s' and '%s'", op, tplType(a), tplType(b))
	}
	if tplIsNumber(a) && tplIsNumber(b) {
		if a.IsFloat() || b.IsFloat() || op == "/" {
			return r.floatArith(op, tplFloat(a), tplFloat(b))
		}
		x, y := tplInt(a), tplInt(b)
		var z int64
		ok := true
		switch op {
		case "+":
			z, ok = tplAdd(x, y)
		case "-":
			z, ok = tplSub(x, y)
		case "*":
			z, ok = tplMul(x, y)
		case "//":
			if y == 0 {
				return undef, r.errf("integer division by zero")
			}
			z, ok = tplFloorDiv(x, y)
		case "%":
			if y == 0 {
				return undef, r.errf("integer modulo by zero")
			}
			z = tplMod(x, y)
		case "**":
			if y < 0 {
				return r.floatArith(op, float64(x), float64(y))
			}
			z, ok = tplPow(x, y)
		}
		if !ok {
			return undef, r.overflow()
		}
		return jinja.NewInt(z), nil
	}
	switch op {
	case "+":
		switch {
		case a.IsList() && b.IsList():
			x, y := a.AsList().Items, b.AsList().Items
			if err := r.newItems(int64(len(x)) + int64(len(y))); err != nil {
				return undef, err
			}
			items := make([]jinja.Value, 0, len(x)+len(y))
			return jinja.NewList(append(append(items, x...), y...)), nil
		case a.IsString() && b.IsString():
			x, y := a.AsString(), b.AsString()
			if err := r.newString(int64(len(x)) + int64(len(y))); err != nil {
				return undef, err
			}
			return jinja.NewString(x + y), nil
		case a.IsString():
			return undef, r.errf("can only concatenate str (not \"%s\") to str (~ joins any values)", tplType(b))
		}
	case "*":
		seq, n := a, b
		if tplIsInt(a) {
			seq, n = b, a
		}
		if !tplIsInt(n) {
			return typeErr()
		}
		k := max(tplInt(n), 0)
		switch {
		case seq.IsString():
			s := seq.AsString()
			if s == "" || k == 0 {
				return jinja.NewString(""), nil
			}
			if k > r.lim.Output/int64(len(s)) {
				return undef, r.errf("the template repeats a string of %d bytes %d times, over the limit of %d bytes for a string", len(s), k, r.lim.Output)
			}
			if err := r.newString(k * int64(len(s))); err != nil {
				return undef, err
			}
			return jinja.NewString(strings.Repeat(s, int(k))), nil
		case seq.IsList():
			items := seq.AsList().Items
			if len(items) == 0 || k == 0 {
				return jinja.NewList(nil), nil
			}
			if k > r.steps/int64(len(items)) {
				return undef, r.errf("the template repeats a list of %d items %d times, more than the %d steps it has left (its limit for this conversation)", len(items), k, max(r.steps, 0))
			}
			if err := r.newItems(k * int64(len(items))); err != nil {
				return undef, err
			}
			out := make([]jinja.Value, 0, k*int64(len(items)))
			for range k {
				out = append(out, items...)
			}
			return jinja.NewList(out), nil
		}
	case "%":
		if a.IsString() {
			return r.percentFormat(a.AsString(), b, false)
		}
	}
	return typeErr()
}

func (r *tplRenderer) floatArith(op string, x, y float64) (jinja.Value, error) {
	undef := jinja.Undefined()
	var z float64
	switch op {
	case "+":
		z = x + y
	case "-":
		z = x - y
	case "*":
		z = x * y
	case "/":
		if y == 0 {
			return undef, r.errf("division by zero")
		}
		z = x / y
	case "//":
		if y == 0 {
			return undef, r.errf("float floor division by zero")
		}
		z = math.Floor(x / y)
	case "%":
		if y == 0 {
			return undef, r.errf("float modulo by zero")
		}
		z = tplFloatMod(x, y)
	case "**":
		if x == 0 && y < 0 {
			return undef, r.errf("zero cannot be raised to a negative power")
		}
		z = math.Pow(x, y)
		if math.IsInf(z, 0) && !math.IsInf(x, 0) && !math.IsInf(y, 0) {
			return undef, r.errf("a power too large for a float")
		}
	}
	return jinja.NewFloat(z), nil
}

// compareOp applies a comparison operator.
func (r *tplRenderer) compareOp(op string, a, b jinja.Value) (bool, error) {
	switch op {
	case "==":
		return r.equal(a, b, 0)
	case "!=":
		eq, err := r.equal(a, b, 0)
		return !eq, err
	case "in":
		return r.contains(b, a)
	case "not in":
		in, err := r.contains(b, a)
		return !in, err
	}
	c, err := r.compare(a, b, op, 0)
	if err != nil {
		return false, err
	}
	switch op {
	case "<":
		return c < 0, nil
	case ">":
		return c > 0, nil
	case "<=":
		return c <= 0, nil
	}
	return c >= 0, nil
}

// equal is Python's a == b.
func (r *tplRenderer) equal(a, b jinja.Value, depth int) (bool, error) {
	if err := r.step(); err != nil {
		return false, err
	}
	if depth > tplMaxValueDepth {
		return false, r.errf("a value nests more than %d deep (the limit; a list or dict holding itself?)", tplMaxValueDepth)
	}
	switch {
	case tplIsNumber(a) && tplIsNumber(b):
		if a.IsFloat() || b.IsFloat() {
			return tplFloat(a) == tplFloat(b), nil
		}
		return tplInt(a) == tplInt(b), nil
	case a.IsString() && b.IsString():
		x, y := a.AsString(), b.AsString()
		if len(x) != len(y) {
			return false, nil
		}
		return x == y, r.spend(int64(len(x)))
	case a.IsList() && b.IsList():
		x, y := a.AsList().Items, b.AsList().Items
		if len(x) != len(y) {
			return false, nil
		}
		for i := range x {
			if eq, err := r.equal(x[i], y[i], depth+1); err != nil || !eq {
				return false, err
			}
		}
		return true, nil
	case a.IsDict() && b.IsDict():
		x, y := a.AsDict(), b.AsDict()
		if len(x.Keys) != len(y.Keys) {
			return false, nil
		}
		for _, k := range x.Keys {
			w, ok := y.Data[k]
			if !ok {
				return false, nil
			}
			if eq, err := r.equal(x.Data[k], w, depth+1); err != nil || !eq {
				return false, err
			}
		}
		return true, nil
	case a.IsNone() && b.IsNone(), a.IsUndefined() && b.IsUndefined():
		return true, nil
	}
	return false, nil
}

// compare orders a and b as Python does (numbers, strings, lists).
func (r *tplRenderer) compare(a, b jinja.Value, op string, depth int) (int, error) {
	if err := r.step(); err != nil {
		return 0, err
	}
	if depth > tplMaxValueDepth {
		return 0, r.errf("a value nests more than %d deep (the limit; a list or dict holding itself?)", tplMaxValueDepth)
	}
	switch {
	case tplIsNumber(a) && tplIsNumber(b):
		if a.IsFloat() || b.IsFloat() {
			x, y := tplFloat(a), tplFloat(b)
			switch {
			case x < y:
				return -1, nil
			case x > y:
				return 1, nil
			case x == y:
				return 0, nil
			}
			return 2, nil // NaN: every comparison false but !=
		}
		x, y := tplInt(a), tplInt(b)
		switch {
		case x < y:
			return -1, nil
		case x > y:
			return 1, nil
		}
		return 0, nil
	case a.IsString() && b.IsString():
		x, y := a.AsString(), b.AsString()
		if err := r.spend(int64(min(len(x), len(y)))); err != nil {
			return 0, err
		}
		return strings.Compare(x, y), nil
	case a.IsUndefined() && b.IsUndefined():
		return 0, nil // Jinja's sort by a missing attribute keeps the order
	case a.IsList() && b.IsList():
		x, y := a.AsList().Items, b.AsList().Items
		for i := 0; i < len(x) && i < len(y); i++ {
			eq, err := r.equal(x[i], y[i], depth+1)
			if err != nil {
				return 0, err
			}
			if !eq {
				return r.compare(x[i], y[i], op, depth+1)
			}
		}
		switch {
		case len(x) < len(y):
			return -1, nil
		case len(x) > len(y):
			return 1, nil
		}
		return 0, nil
	}
	return 0, r.errf("'%s' not supported between instances of '%s' and '%s'", op, tplType(a), tplType(b))
}

// contains is Python's item in container (false for none and undefined).
func (r *tplRenderer) contains(container, item jinja.Value) (bool, error) {
	switch {
	case container.IsString():
		if !item.IsString() {
			return false, nil
		}
		if err := r.spend(int64(len(container.AsString()))); err != nil {
			return false, err
		}
		return strings.Contains(container.AsString(), item.AsString()), nil
	case container.IsList():
		for _, v := range container.AsList().Items {
			if eq, err := r.equal(v, item, 0); err != nil || eq {
				return eq, err
			}
		}
		return false, nil
	case container.IsDict():
		if !item.IsString() && !tplIsNumber(item) {
			return false, nil
		}
		return container.AsDict().Has(tplScalarStr(item)), nil
	case container.IsUndefined():
		return false, nil
	}
	return false, r.errf("argument of type '%s' is not iterable", tplType(container))
}
