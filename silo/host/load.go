package host

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxFileSize bounds the configuration file Load reads.
const maxFileSize = 1 << 20

// Load reads the configuration from the command line args (without the
// program name), the environment through lookupEnv (os.LookupEnv in a
// program), and the YAML file that
// --config or GRANARY_CONFIG names, over DefaultConfig; a flag wins over
// the environment, which wins over the file. It then validates the
// result. Each error names the field and where its value came from, and
// Load reports every one it finds, joined. On --help or -h it writes
// Usage to standard output and returns an error that errors.Is
// flag.ErrHelp.
func Load(args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	return load(args, lookupEnv, os.Stdout)
}

// setting is a value given on the command line.
type setting struct {
	f     *field
	value string
}

// flagValue records the values of one flag for load to apply after
// parsing, so that a bad value is reported as any other source's is.
type flagValue struct {
	f    *field
	into *[]setting
}

func (v *flagValue) String() string { return "" }

func (v *flagValue) Set(s string) error {
	*v.into = append(*v.into, setting{v.f, s})
	return nil
}

func (v *flagValue) IsBoolFlag() bool { return v.f.isBool }

func load(args []string, lookupEnv func(string) (string, bool), helpOut io.Writer) (Config, error) {
	flags, file, err := parseFlags(args, helpOut)
	if err != nil {
		return Config{}, err
	}
	c := DefaultConfig()
	c.sources = map[string]string{}
	var errs []error
	fileSource := "flag --" + configFlag
	if file == "" {
		file, _ = lookupEnv(configEnv)
		fileSource = "env " + configEnv
	}
	if file != "" {
		c.file = file
		errs = append(errs, c.applyFile(file, fileSource)...)
	}
	for _, f := range fields {
		// An empty variable counts as unset, unless the empty value
		// turns the setting's subsystem off.
		if v, set := lookupEnv(envName(f.path)); v != "" || set && f.emptyOff {
			errs = append(errs, c.apply(f, v, "env "+envName(f.path)))
		}
	}
	for _, s := range flags {
		errs = append(errs, c.apply(s.f, s.value, "flag --"+s.f.path))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// parseFlags parses args into the settings they give, in order, and the
// configuration file they name.
func parseFlags(args []string, helpOut io.Writer) (settings []setting, file string, err error) {
	program := filepath.Base(os.Args[0])
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, help is written by Usage
	fs.StringVar(&file, configFlag, "", "the YAML configuration file")
	for _, f := range fields {
		fs.Var(&flagValue{f: f, into: &settings}, f.path, f.help)
	}
	err = fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		Usage(helpOut, program)
		return nil, "", fmt.Errorf("config: help requested: %w", flag.ErrHelp)
	case err != nil:
		const unknown = "flag provided but not defined: -"
		if name, ok := strings.CutPrefix(err.Error(), unknown); ok {
			return nil, "", &FieldError{Field: name, Source: "flag --" + name, Reason: "unknown flag" + suggest(name) + "; --help lists them"}
		}
		return nil, "", fmt.Errorf("config: %s", strings.Replace(err.Error(), ": -", ": --", 1))
	case fs.NArg() > 0:
		return nil, "", fmt.Errorf("config: unexpected argument %q: settings are flags such as --name=NAME", fs.Arg(0))
	}
	return settings, file, nil
}

// apply sets the field f from text, recording src as its source.
func (c *Config) apply(f *field, text, src string) error {
	if err := f.set(c, text); err != nil {
		return &FieldError{Field: f.path, Source: src, Reason: err.Error()}
	}
	c.sources[f.path] = src
	return nil
}

// applyFile sets the fields the YAML file at name gives, each with
// "file NAME line N" as its source.
func (c *Config) applyFile(name, nameSource string) []error {
	data, err := readFile(name)
	if err != nil {
		return []error{&FieldError{Field: configFlag, Source: nameSource, Reason: err.Error()}}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return []error{fmt.Errorf("config: file %s: %w", name, err)}
	}
	if len(doc.Content) == 0 {
		return nil // an empty file, or one of comments only
	}
	root := resolve(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		if root.Tag == "!!null" {
			return nil
		}
		return []error{fmt.Errorf("config: file %s line %d: the document must be a mapping of keys such as name and cluster", name, root.Line)}
	}
	return c.applyMapping(name, root, "")
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, maxFileSize)
	}
	return data, nil
}

// applyMapping applies the keys of the mapping n, whose path is prefix
// ("" for the document).
func (c *Config) applyMapping(file string, n *yaml.Node, prefix string) []error {
	var errs []error
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], resolve(n.Content[i+1])
		src := fmt.Sprintf("file %s line %d", file, k.Line)
		path := k.Value
		if prefix != "" {
			path = prefix + "." + k.Value
		}
		if k.Kind != yaml.ScalarNode {
			errs = append(errs, fmt.Errorf("config: file %s line %d: a key must be a plain name", file, k.Line))
			continue
		}
		if line, dup := seen[k.Value]; dup {
			errs = append(errs, &FieldError{Field: path, Source: src, Reason: fmt.Sprintf("repeats the key of line %d", line)})
			continue
		}
		seen[k.Value] = k.Line
		switch f := fieldByPath[path]; {
		case f != nil:
			text, err := leafText(f, val)
			if err != nil {
				errs = append(errs, &FieldError{Field: path, Source: src, Reason: err.Error()})
				continue
			}
			errs = append(errs, c.apply(f, text, src))
		case sections[path]:
			switch {
			case val.Kind == yaml.MappingNode:
				errs = append(errs, c.applyMapping(file, val, path)...)
			case val.Kind == yaml.ScalarNode && val.Tag == "!!null":
				// An empty section: nothing to set.
			default:
				errs = append(errs, &FieldError{Field: path, Source: src, Reason: "is a section: want a mapping of its keys " + strings.Join(sectionKeys(path), ", ")})
			}
		default:
			errs = append(errs, &FieldError{Field: path, Source: src, Reason: "unknown key" + suggest(path)})
		}
	}
	return errs
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// leafText is the text of a field's value node: a scalar, or for a list
// a sequence of scalars (or one comma-separated scalar).
func leafText(f *field, n *yaml.Node) (string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "", nil
		}
		return n.Value, nil
	case yaml.SequenceNode:
		if !f.isList {
			return "", errors.New("want a single value, not a list")
		}
		items := make([]string, 0, len(n.Content))
		for _, item := range n.Content {
			if item = resolve(item); item.Kind != yaml.ScalarNode {
				return "", fmt.Errorf("line %d: a list item must be a single value", item.Line)
			}
			if strings.Contains(item.Value, ",") {
				return "", fmt.Errorf("line %d: item %q contains a comma", item.Line, item.Value)
			}
			items = append(items, item.Value)
		}
		return strings.Join(items, ","), nil
	default:
		return "", errors.New("want a value, not a mapping")
	}
}

// sectionKeys lists the keys directly under the section path.
func sectionKeys(path string) []string {
	var keys []string
	for p := range fieldByPath {
		if rest, ok := strings.CutPrefix(p, path+"."); ok {
			keys = append(keys, strings.SplitN(rest, ".", 2)[0])
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// suggest returns "; did you mean X?" for the known path nearest to an
// unknown one, or "" if none is near: one a couple of edits away, else
// one that ends in the same key (a key in the wrong section).
func suggest(unknown string) string {
	var known []string
	for p := range fieldByPath {
		known = append(known, p)
	}
	for p := range sections {
		known = append(known, p)
	}
	sort.Strings(known)
	best, bestDist := "", 3
	for _, p := range known {
		if d := editDistance(unknown, p); d < bestDist {
			best, bestDist = p, d
		}
	}
	if best != "" {
		return "; did you mean " + best + "?"
	}
	last := unknown[strings.LastIndexByte(unknown, '.')+1:]
	for _, p := range known {
		if strings.HasSuffix(p, "."+last) || p == last {
			return "; did you mean " + p + "?"
		}
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
