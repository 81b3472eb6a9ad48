package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"
)

// allCommands walks the command tree: every command a user can ask for help.
func allCommands(c *cobra.Command) [][]string {
	var out [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		out = append(out, path)
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			walk(sub, append(append([]string{}, path...), sub.Name()))
		}
	}
	c.InitDefaultCompletionCmd()
	walk(c, nil)
	return out
}

// TestHelpExitsZero: --help, -h and `help X` print the usage of every
// command on stdout and exit 0 (packagers and scripts call --help).
func TestHelpExitsZero(t *testing.T) {
	cmds := allCommands(newRootCommand(nil, nil))
	if len(cmds) < 13 { // root, 8 commands, completion and its 4 shells
		t.Fatalf("only %d commands: %v", len(cmds), cmds)
	}
	for _, path := range cmds {
		for _, form := range [][]string{append(append([]string{}, path...), "--help"), append(append([]string{}, path...), "-h"), append([]string{"help"}, path...)} {
			out, stderr, code := runCLI(t, form...)
			if code != 0 || stderr != "" || !strings.Contains(out, "Usage:") {
				t.Fatalf("hotpath %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(form, " "), code, out, stderr)
			}
		}
	}
	out, _, _ := runCLI(t, "--help")
	for _, want := range []string{"exit codes:", "3  gate: FAIL", "trace-profile", "completion", "--version"} {
		if !strings.Contains(out, want) {
			t.Fatalf("hotpath --help lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = runCLI(t, "gate", "--help")
	if !strings.Contains(out, "4  gate: INCONCLUSIVE") || !strings.Contains(out, "--max-increase") {
		t.Fatalf("gate --help:\n%s", out)
	}
}

func TestVersion(t *testing.T) {
	out, stderr, code := runCLI(t, "--version")
	// A test binary is not built by the Makefile: the fallback from the
	// build information applies (the collector version from go.mod).
	if code != 0 || stderr != "" || !regexp.MustCompile(`(?m)^hotpath \S+\ncommit: \S+\ncollector: v0\.\d+\.\d+\ngo: go1\.`).MatchString(out) {
		t.Fatalf("--version: %d %q %q", code, out, stderr)
	}
}

// TestUsageErrors: what cobra or a command refuses on the command line
// exits 2 with the message and a hint on stderr, nothing on stdout.
func TestUsageErrors(t *testing.T) {
	db := localDB(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"profile", "--frobnicate"}, "unknown flag: --frobnicate"},
		{[]string{"profile", "--db", db, "--service", "api", "extra"}, `unexpected argument "extra"`},
		{[]string{"top", "-n", "many"}, `invalid argument "many"`},
		{[]string{"gate", "--db", db, "--service", "api"}, "--service, --baseline and --candidate are required"},
		{[]string{"symbolize", "--build-id", "1f0e"}, "give --symbols FILE or --debuginfod"},
		{[]string{"symbolize", "--symbols", "a.debug", "--debuginfod"}, "--symbols and --debuginfod exclude each other"},
		{[]string{"symbolize", "--debuginfod", "--executable", "app"}, "--executable goes with --symbols"},
		{[]string{"trace-profile", "--db", db}, "a trace ID is required"},
		{[]string{"trace-profile", "--db", db, "a", "b"}, "one trace ID expected, got 2 arguments: a b"},
		{[]string{"sql", "--db", db, " "}, "no query"},
	} {
		out, stderr, code := runCLI(t, tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(stderr, tc.want) {
			t.Fatalf("hotpath %s: exit %d, want 2 and %q on stderr\nstdout: %q\nstderr: %q", strings.Join(tc.args, " "), code, tc.want, out, stderr)
		}
	}
}

// TestGoFlagStyle: command lines written for the first version, on the
// standard flag package (-service with one dash, --o with two), still work
// and give the same output.
func TestGoFlagStyle(t *testing.T) {
	db := localDB(t)
	want, _, code := runCLI(t, "top", "--db", db, "--service", "api", "--since", "1h", "-n", "3", "--format", "csv")
	if code != 0 {
		t.Fatal(code)
	}
	got, stderr, code := runCLI(t, "top", "-db", db, "-service=api", "-since", "1h", "--n", "3", "-format", "csv")
	if code != 0 || got != want {
		t.Fatalf("go flag style: %d %s\n%s\nwant\n%s", code, stderr, got, want)
	}
	out := filepath.Join(t.TempDir(), "cpu.folded")
	if _, stderr, code := runCLI(t, "profile", "-db", db, "-service", "api", "--o", out); code != 0 {
		t.Fatalf("--o: %d %s", code, stderr)
	}
	if b, err := os.ReadFile(out); err != nil || !strings.Contains(string(b), "main.main;main.serve") {
		t.Fatalf("--o wrote %q (%v)", b, err)
	}
	if _, _, code := runCLI(t, "profile", "-help"); code != 0 {
		t.Fatalf("-help: %d", code)
	}
	// sql's flags come before the query, whose words stay as written.
	root := newRootCommand(nil, nil)
	if got := goFlagStyle(root, []string{"sql", "-db", "x.duckdb", "SELECT", "-format", "-1"}); strings.Join(got, " ") != "sql --db x.duckdb SELECT -format -1" {
		t.Fatalf("sql arguments rewritten: %q", got)
	}
	// A value that looks like a flag stays a value.
	if _, stderr, code := runCLI(t, "profile", "--db", db, "--service", "api", "--title", "-service"); code != 0 {
		t.Fatalf("value -service: %d %s", code, stderr)
	}
}

// TestCompleteServices: completing --service asks the database the command
// line points at, through the query layer.
func TestCompleteServices(t *testing.T) {
	db := localDB(t)
	for _, args := range [][]string{
		{"__complete", "profile", "--db", db, "--service", ""},
		{"__complete", "top", "--db", db, "--since", "2h", "--service", ""},
		{"__complete", "gate", "--db", db, "--service", ""},
		{"__complete", "trace-profile", "--db", db, "--service", ""},
	} {
		out, stderr, code := runCLI(t, args...)
		if code != 0 || !regexp.MustCompile(`(?m)^api\t\d+ samples$`).MatchString(out) || !regexp.MustCompile(`(?m)^worker\t200 samples$`).MatchString(out) || !strings.HasSuffix(out, ":4\n") {
			t.Fatalf("%v: %d %q %q", args, code, out, stderr)
		}
	}
	out, _, _ := runCLI(t, "__complete", "profile", "--db", db, "--service", "wo")
	if strings.Contains(out, "api") || !strings.Contains(out, "worker") {
		t.Fatalf("prefix: %q", out)
	}
	out, _, _ = runCLI(t, "__complete", "profile", "--format", "")
	if !strings.Contains(out, "pprof\n") || !strings.Contains(out, "html\n") {
		t.Fatalf("formats: %q", out)
	}
	// A database that is not there completes nothing, and says why only in
	// cobra's debug output.
	out, _, code := runCLI(t, "__complete", "profile", "--db", filepath.Join(t.TempDir(), "none.duckdb"), "--service", "")
	if code != 0 || out != ":4\n" {
		t.Fatalf("no database: %d %q", code, out)
	}
}

var (
	builtCLI     string
	builtCLIErr  error
	buildCLIOnce sync.Once
)

// cliBinary builds this command as `hotpath` with the Makefile's kind of
// -ldflags, once per test run: shells complete by running the binary.
func cliBinary(t *testing.T) string {
	t.Helper()
	buildCLIOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hotpath-cli-test")
		if err != nil {
			builtCLIErr = err
			return
		}
		builtCLI = filepath.Join(dir, "hotpath")
		cmd := exec.Command(goTool(t), "build", "-o", builtCLI,
			"-ldflags", "-X main.version=9.8.7 -X main.commit=0123456789ab -X main.collectorVersion=v0.162.0", ".")
		if out, err := cmd.CombinedOutput(); err != nil {
			builtCLIErr = err
			builtCLI = string(out)
		}
	})
	if builtCLIErr != nil {
		t.Fatalf("go build: %v\n%s", builtCLIErr, builtCLI)
	}
	return builtCLI
}

// TestBuiltBinary: the linker-set version, and bash completion end to end
// (the script cobra generates, calling the binary for service names).
func TestBuiltBinary(t *testing.T) {
	bin := cliBinary(t)
	defer os.RemoveAll(filepath.Dir(bin))
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "hotpath 9.8.7\ncommit: 0123456789ab\ncollector: v0.162.0\ngo: go1.") {
		t.Fatalf("--version: %v %q", err, out)
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		script, err := exec.Command(bin, "completion", shell).Output()
		if err != nil || !strings.Contains(string(script), "__complete") {
			t.Fatalf("completion %s: %v\n%.300s", shell, err, script)
		}
	}
	db := localDB(t)
	script := filepath.Join(t.TempDir(), "hotpath.bash")
	b, _ := exec.Command(bin, "completion", "bash").Output()
	if err := os.WriteFile(script, b, 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(line string) string {
		t.Helper()
		words := strings.Fields(line)
		if strings.HasSuffix(line, " ") {
			words = append(words, "")
		}
		// cobra's bash script relies on the bash-completion package, as
		// an interactive shell on Debian has it.
		sh := `source /usr/share/bash-completion/bash_completion && source "$SCRIPT" && COMP_LINE="$LINE" && COMP_POINT=${#COMP_LINE} && COMP_WORDS=(` + quoteWords(words) + `) && COMP_CWORD=$((${#COMP_WORDS[@]}-1)) && __start_hotpath && printf '%s\n' "${COMPREPLY[@]}"`
		cmd := exec.Command("bash", "-c", sh)
		cmd.Env = append(os.Environ(), "SCRIPT="+script, "LINE="+line, "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
		// compopt complains on stderr outside a real completion: only
		// stdout, COMPREPLY, is the answer.
		var errOut strings.Builder
		cmd.Stderr = &errOut
		res, err := cmd.Output()
		if err != nil {
			t.Fatalf("bash completion of %q: %v\n%s%s", line, err, res, errOut.String())
		}
		return string(res)
	}
	if got := complete("hotpath pro"); strings.TrimSpace(got) != "profile" {
		t.Fatalf("command: %q", got)
	}
	if got := complete("hotpath gate --max-i"); strings.TrimSpace(got) != "--max-increase" {
		t.Fatalf("flag: %q", got)
	}
	if got := complete("hotpath profile --db " + db + " --service wor"); strings.TrimSpace(got) != "worker" {
		t.Fatalf("service: %q", got)
	}
}

func quoteWords(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// TestReadmeExamplesParse: every `hotpath …` line in this command's README
// and the repository README names a command and flags that exist, with
// valid values, as cobra parses them (the examples that run against data
// are exercised by the other tests with the deploy fixture).
func TestReadmeExamplesParse(t *testing.T) {
	n := 0
	for _, readme := range []string{"README.md", "../../README.md", "../../docs/sql.md"} {
		f, err := os.Open(readme)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		inCode := false
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(line, "```") {
				inCode = !inCode
				continue
			}
			if !inCode {
				continue
			}
			line = strings.TrimPrefix(strings.TrimPrefix(line, "bin/"), "$ ")
			for _, part := range strings.Split(line, "|") {
				part = strings.TrimSpace(part)
				part = strings.TrimPrefix(strings.TrimPrefix(part, "source <("), "bin/")
				if !strings.HasPrefix(part, "hotpath ") {
					continue
				}
				args := shellWords(strings.TrimPrefix(part, "hotpath "))
				if len(args) == 0 || strings.HasSuffix(args[0], ":") {
					continue // output shown in the README ("hotpath gate: FAIL …")
				}
				n++
				root := newRootCommand(nil, nil)
				root.InitDefaultCompletionCmd()
				args = goFlagStyle(root, args)
				cmd, rest, err := root.Find(args)
				if err == nil {
					err = cmd.ParseFlags(rest)
				}
				if err == nil {
					err = cmd.ValidateArgs(cmd.Flags().Args())
				}
				if err != nil {
					t.Errorf("%s: %q: %v", readme, part, err)
				}
			}
		}
		f.Close()
	}
	if n < 30 {
		t.Fatalf("only %d examples found", n)
	}
}

// shellWords splits an example as sh would, for what the READMEs use:
// double and single quotes, $VAR kept as text, a comment, and the end of
// the command at a redirection, pipe, && or ).
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case r == '#' && !inWord, r == '>' || r == '<' || r == '&' || r == ')':
			if inWord {
				words = append(words, cur.String())
			}
			return words
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}
