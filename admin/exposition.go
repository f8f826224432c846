package admin

import (
	"bytes"
	"io"
	"regexp"
	"strings"
	"sync"

	"github.com/VictoriaMetrics/metrics"
)

// The metrics library writes "# HELP name" without text (it keeps none), and
// a few of its Go runtime and process families break Prometheus' naming
// rules. The exposition is therefore written to a buffer and corrected line
// by line: help texts come from docs/metrics.md (one source for the reader
// and for Prometheus), and the library families below get conventional names
// or types. This runs once per scrape, never on the request path.

// libraryRenames are the library's families whose names promtool rejects:
// counters without _total, and _count on what is not a histogram or summary.
var libraryRenames = map[string]string{
	"go_cgo_calls_count": "go_cgo_calls_total",
	"go_gc_forced_count": "go_gc_forced_total",
	"go_cpu_count":       "go_cpus",
}

// libraryCounters are the library's cumulative families that it types as
// gauges (they only grow: bytes and syscalls since the process started).
var libraryCounters = map[string]bool{
	"process_io_read_bytes_total":            true,
	"process_io_written_bytes_total":         true,
	"process_io_read_syscalls_total":         true,
	"process_io_write_syscalls_total":        true,
	"process_io_storage_read_bytes_total":    true,
	"process_io_storage_written_bytes_total": true,
}

var expositionBuf = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// writeMetrics writes every registered metric, Go runtime and process
// metrics included, with the help texts of help (family → text).
func writeMetrics(w io.Writer, help map[string]string) {
	bb := expositionBuf.Get().(*bytes.Buffer)
	defer expositionBuf.Put(bb)
	bb.Reset()
	metrics.WritePrometheus(bb, true)
	out := expositionBuf.Get().(*bytes.Buffer)
	defer expositionBuf.Put(out)
	out.Reset()
	text := bb.Bytes()
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		fixLine(out, line, help)
		out.WriteByte('\n')
	}
	_, _ = w.Write(out.Bytes())
}

// fixLine writes line with its family renamed, its type corrected or its
// help text added, as the tables above and help say.
func fixLine(out *bytes.Buffer, line []byte, help map[string]string) {
	switch {
	case bytes.HasPrefix(line, []byte("# HELP ")):
		name, text, _ := strings.Cut(string(line[len("# HELP "):]), " ")
		name = rename(name)
		if text == "" {
			text = escapeHelp(help[name])
		}
		out.WriteString("# HELP " + name)
		if text != "" {
			out.WriteString(" " + text)
		}
	case bytes.HasPrefix(line, []byte("# TYPE ")):
		name, typ, _ := strings.Cut(string(line[len("# TYPE "):]), " ")
		if libraryCounters[name] {
			typ = "counter"
		}
		out.WriteString("# TYPE " + rename(name) + " " + typ)
	case len(line) > 0 && line[0] == 'g': // every family of libraryRenames is a go_ one
		end := bytes.IndexAny(line, "{ ")
		if end > 0 {
			if to, ok := libraryRenames[string(line[:end])]; ok {
				out.WriteString(to)
				out.Write(line[end:])
				return
			}
		}
		out.Write(line)
	default:
		out.Write(line)
	}
}

func rename(name string) string {
	if to, ok := libraryRenames[name]; ok {
		return to
	}
	return name
}

var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

// escapeHelp escapes a help text as the text format requires.
func escapeHelp(s string) string { return helpEscaper.Replace(s) }

// docRow is a row of a metrics table of docs/metrics.md:
// | `name`[, `name`...] | type | labels | meaning |
var docRow = regexp.MustCompile("(?m)^\\| (`[a-z_:][a-z0-9_:]*`(?:, `[a-z_:][a-z0-9_:]*`)*) \\| [a-z]+ \\|[^|\n]*\\| ([^\n]+) \\|$")

var docName = regexp.MustCompile("`([a-z_:][a-z0-9_:]*)`")

// MetricsHelp reads the help text of every metric family from the tables of
// docs/metrics.md: a row's meaning, without Markdown's backquotes, is the
// help text of each family the row names.
func MetricsHelp(doc string) map[string]string {
	help := map[string]string{}
	for _, row := range docRow.FindAllStringSubmatch(doc, -1) {
		text := strings.ReplaceAll(strings.TrimSpace(row[2]), "`", "")
		for _, n := range docName.FindAllStringSubmatch(row[1], -1) {
			help[n[1]] = text
		}
	}
	return help
}
