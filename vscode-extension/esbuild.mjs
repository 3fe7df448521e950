// Bundles the extension (dist/extension.js) or, with --tests, the node tests (out/test/*.test.js).
// In test bundles `vscode` resolves to test/vscodeStub.ts, a stub of the editor API: VS Code
// itself cannot run in CI; the language client, the server and the JSON messages stay real.
import * as esbuild from 'esbuild';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const production = process.argv.includes('--production');
const watch = process.argv.includes('--watch');
const tests = process.argv.includes('--tests');

/** Resolves `import 'vscode'` to the stub in test bundles. */
const vscodeStub = {
  name: 'vscode-stub',
  setup(build) {
    build.onResolve({ filter: /^vscode$/ }, () => ({ path: path.join(here, 'test', 'vscodeStub.ts') }));
  },
};

const common = {
  bundle: true,
  platform: 'node',
  target: 'node18',
  format: 'cjs',
  sourcemap: !production,
  logLevel: 'warning',
};

const options = tests
  ? {
      ...common,
      entryPoints: readdirSync(path.join(here, 'test'))
        .filter((name) => name.endsWith('.test.ts'))
        .map((name) => path.join(here, 'test', name)),
      outdir: path.join(here, 'out', 'test'),
      plugins: [vscodeStub],
    }
  : {
      ...common,
      entryPoints: [path.join(here, 'src', 'extension.ts')],
      outfile: path.join(here, 'dist', 'extension.js'),
      external: ['vscode'],
      minify: production,
    };

if (watch) {
  const context = await esbuild.context(options);
  await context.watch();
} else {
  await esbuild.build(options);
}
