// Command composecheck loads and validates a Compose file the way `docker compose config -q`
// does, for machines that have the docker client but not its compose plugin (CI, the dev
// box). It uses compose-go, the library the plugin itself is built on, with the same
// options the plugin's `config` command passes: the OS environment and the project
// directory's .env for interpolation, schema validation, path resolution, normalization,
// the consistency checks, env_file resolution and container-name uniqueness.
//
// Usage:
//
//	composecheck FILE
//
// The project directory is FILE's directory (as with `docker compose -f FILE`). A valid file
// prints nothing and exits 0; an invalid one prints one line, "composecheck: FILE: reason",
// and exits 1; bad usage exits 2.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run is main without the process: the exit code, with any message written to stderr.
func run(args []string, stderr io.Writer) int {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, "usage: composecheck FILE (a Compose file; its directory is the project directory)")
		return 2
	}
	file := args[0]
	if err := check(context.Background(), file); err != nil {
		fmt.Fprintf(stderr, "composecheck: %s: %s\n", file, oneLine(err))
		return 1
	}
	return 0
}

// check returns why the Compose file at path is not one `docker compose config` accepts,
// or nil when it is.
func check(ctx context.Context, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	options, err := cli.NewProjectOptions([]string{abs},
		// The plugin's own order: the project directory first (here the file's, as
		// `-f FILE` without --project-directory gives), the OS environment winning over
		// the directory's .env, then what `config` adds on top.
		cli.WithWorkingDirectory(filepath.Dir(abs)),
		cli.WithOsEnv,
		cli.WithEnvFiles(),
		cli.WithDotEnv,
		cli.WithDefaultProfiles(),
		cli.WithInterpolation(true),
		cli.WithResolvedPaths(true),
		cli.WithNormalization(true),
		cli.WithConsistency(true),
		cli.WithDiscardEnvFile,
	)
	if err != nil {
		return err
	}
	project, err := options.LoadProject(ctx)
	if err != nil {
		return err
	}
	if project.Name == "" {
		return errors.New("project name can't be empty")
	}
	// `config` resolves the services' env_file entries and checks container names after
	// loading, then renders the model: each step can still refuse the file.
	if project, err = project.WithServicesEnvironmentResolved(true); err != nil {
		return err
	}
	if err = project.CheckContainerNameUnicity(); err != nil {
		return err
	}
	_, err = project.MarshalYAML()
	return err
}

// oneLine folds a multi-line error (schema validation can report several causes) into one
// line, so the caller's failure message stays one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}
