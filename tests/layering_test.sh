#!/usr/bin/env bash
# The layering of docs/layout.md, checked on every include and every name:
#  1. the table between "<!-- layers" and "<!-- /layers -->" in docs/layout.md
#     is the rule: each file's includes and namespace-qualified names (of the
#     folder that holds it: the longest row) are only of the rows its
#     includes column names, and every row names only rows below it;
#  2. names taken from a layer a folder does not include, through a `using`
#     line in a header of a layer it does (runtime.h's `using lowering::Shapes`),
#     are exactly the table "<!-- names through" lists;
#  3. docs/design.md's "## Layers" names the same folders in the same order;
#  4. no target name or device test outside the targets' folders and the
#     backend's own files (runtime/backend.h, runtime/backend.cpp);
#  5. programs are values, not cache entries; bytes become a program in one place.
# Exits non-zero naming each breach. LAYERING_ROOT: check that tree instead
# (the test of this test plants lines in a copy).
set -uo pipefail
cd "${LAYERING_ROOT:-$(dirname "$0")/..}"
fail=0

python3 - <<'PY' || fail=1
import os, re, sys

def rows_between(text, start, end):
    i = text.index(start)
    j = text.index(end, i)
    rows = []
    for line in text[i:j].splitlines():
        if not line.startswith('| `'):
            continue
        rows.append([c.strip() for c in line.strip().strip('|').split('|')])
    return rows

layout = open('docs/layout.md').read()
table = rows_between(layout, '<!-- layers', '<!-- /layers -->')
if not table:
    sys.exit('layering: docs/layout.md has no layers table')

LIBS = {'libtorch': re.compile(r'^(ATen|c10|torch)/'), 'LLVM': re.compile(r'^llvm/')}
NAMESPACES = {'executor': 'executor/', 'lowering': 'lowering/', 'cache': 'cache/', 'runtime': 'runtime/',
              'bridge': 'bridge/', 'ir': 'graph_ir/', 'debug': 'debug/'}

pending = []
everywhere = []
folders = []      # in table order, top first
allowed = {}      # folder -> {folder or lib: None (all) or set of headers allowed ("only" notes)}
for cells in table:
    folder = cells[0].strip('`')
    folders.append(folder)
    allow = {}
    for part in re.split(r',\s*(?![^()]*\))', cells[2]):
        m = re.match(r'\s*([A-Za-z0-9_./+-]+)\s*(\((.*)\))?', part)
        if not m or m.group(1) == 'nothing':
            continue
        name = m.group(1)
        note = m.group(3) or ''
        key = name if name in LIBS else name.rstrip('/') + '/'
        if key not in LIBS and key not in [f for f in (c[0].strip('`') for c in table)]:
            if os.path.isdir(name.rstrip('/')):  # a folder of this tree, yet no row: an error; else a library
                pending.append(f'docs/layout.md: {folder} includes {name}, which is no row of the table')
            continue
        only = set(re.findall(r'`([^`]+)`', note)) if 'only' in note else None
        allow[key] = only
    allowed[folder] = allow
    # A row any layer may include ("every layer may include it": env/).
    if 'every layer may include it' in cells[2]:
        everywhere.append(folder)

for f in folders:
    for e in everywhere:
        if e != f:
            allowed[f].setdefault(e, None)
failures = pending
# One way: a row names only rows below it.
for i, f in enumerate(folders):
    for dep in allowed[f]:
        if dep in LIBS:
            continue
        if dep not in folders[i + 1:]:
            failures.append(f'docs/layout.md: {f} includes {dep}, which is not below it in the table')

def folder_of(path):  # the row of a file or an included header: the longest folder that holds it
    best = None
    for f in folders:
        if path.startswith(f) and (best is None or len(f) > len(best)):
            best = f
    return best

def source_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ('build', '__pycache__', '.venv', 'tests')]
        for n in filenames:
            if n.endswith(('.h', '.cpp', '.c')):
                yield os.path.join(dirpath, n)

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
files = {}
for top in sorted({f.split('/')[0] for f in folders}):
    if os.path.isdir(top):
        for p in source_files(top):
            p = os.path.relpath(p)
            f = folder_of(p)
            if f is None:
                failures.append(f'{p}: in no row of docs/layout.md\'s table')
                continue
            files[p] = (f, open(p, errors='replace').read())

def strip_comments(text):
    text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
    text = re.sub(r'//[^\n]*', '', text)
    return re.sub(r'"(\\.|[^"\\\n])*"', '""', text)

for p, (f, text) in sorted(files.items()):
    allow = allowed[f]
    for n, line in enumerate(text.splitlines(), 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        inc = m.group(1)
        for lib, pat in LIBS.items():
            if pat.match(inc) and lib not in allow:
                failures.append(f'{p}:{n}: {f} must not include {lib} ({inc})')
        dep = folder_of(inc)
        if dep is None or dep == f:
            continue
        if dep not in allow:
            failures.append(f'{p}:{n}: {f} must not include {dep} ({inc})')
        elif allow[dep] is not None and os.path.basename(inc) not in allow[dep]:
            failures.append(f'{p}:{n}: {f} includes only {", ".join(sorted(allow[dep]))} of {dep} ({inc})')
    code = strip_comments(text)
    for ns, dep in NAMESPACES.items():
        if dep == f or dep in allow or f.startswith(dep):
            continue
        for m in re.finditer(r'(?:(?<![A-Za-z0-9_:])|(?<=lazyjit::))' + ns + r'::', code):
            n = code.count('\n', 0, m.start()) + 1
            failures.append(f'{p}: {f} names {ns}:: ({dep} is not among its includes)')
            break

# Names through another layer's `using` lines.
USING = re.compile(r'^\s*using\s+(?:([A-Za-z_]\w*)\s*=\s*)?(?:typename\s+)?(?:lazyjit::)?(\w+)::(?:\w+::)*?(\w+)\s*;', re.M)
exported = []  # (header, name, from folder)
for p, (f, text) in files.items():
    if not p.endswith('.h'):
        continue
    for m in USING.finditer(strip_comments(text)):
        alias, ns, name = m.group(1), m.group(2), m.group(3)
        if ns in NAMESPACES and NAMESPACES[ns] != f:
            exported.append((p, alias or name, NAMESPACES[ns]))
listed = set()
for cells in rows_between(layout, '<!-- names through', '<!-- /names through -->'):
    folder = cells[0].strip('`')
    for name in re.findall(r'`([^`]+)`', cells[1]):
        listed.add((folder, name, cells[2].strip().rstrip('/') + '/', cells[3].strip('`')))
found = set()
for p, (f, text) in files.items():
    code = strip_comments(text)
    incs = set(INCLUDE.findall(text))
    for header, name, dep in exported:
        if dep == f or dep in allowed[f] or folder_of(header) == f:
            continue
        if folder_of(header) not in allowed[f]:
            continue
        if re.search(r'(?<![A-Za-z0-9_])' + re.escape(name) + r'\b', code):
            found.add((f, name, dep, header))
for f, name, dep, header in sorted(found - listed):
    failures.append(f'{f} names {name} of {dep} through {header}\'s using line: not in docs/layout.md\'s "names through" list')
for f, name, dep, header in sorted(listed - found):
    failures.append(f'docs/layout.md lists {name} ({dep}) as reaching {f} through {header}: it no longer does')

# docs/design.md's Layers section: the same folders, in the same order.
design = open('docs/design.md').read()
m = re.search(r'^## Layers\n(.*?)(?=^## )', design, re.S | re.M)
if not m:
    failures.append('docs/design.md has no "## Layers" section')
else:
    named = re.findall(r'^[-*] `([^`]+/)`', m.group(1), re.M)
    if named != folders:
        failures.append('docs/design.md\'s Layers list differs from docs/layout.md\'s table:\n  design: ' +
                        ' '.join(named) + '\n  layout: ' + ' '.join(folders))

for line in failures:
    print('layering: ' + line)
sys.exit(1 if failures else 0)
PY

# Target names and device tests: only the targets' folders and the backend's
# own files (runtime/backend.h, runtime/backend.cpp) answer what the target is.
# A target's name compared, a device type or dispatch key of a GPU named, a
# test of the backend's device; in Python, a target's name compared.
if grep -rnE '[=!]= *"(cpu|cuda|cuda-sim)"|"(cpu|cuda|cuda-sim)" *[=!]=|DispatchKey::CUDA|DeviceType::CUDA|\bkCUDA\b|\.is_cuda\(\)|data_device\(\)\.is_cpu\(\)|device_\.is_cpu\(\)|AtenDevice' \
     --include='*.h' --include='*.cpp' graph_ir cache lowering executor runtime tracer bridge debug python tools 2>/dev/null |
     grep -vE '^runtime/backend\.(h|cpp):' | grep -vE '^[^:]+:[0-9]+:\s*//'; then
  echo "layering: a target question answered outside the targets' folders and the backend (ask runtime/backend.h)"; fail=1
fi
if grep -rnE 'target\(\) *[=!]=|[=!]= *_C\.target\(\)' --include='*.py' python 2>/dev/null; then
  echo "layering: Python tests the target's name (ask _C: data_device_type, data_on_host, data_generator)"; fail=1
fi
# The cache stores what it is given: nothing downcasts an entry into a program.
if grep -rnE "static_cast<(const )?(lowering::)?Program" --include='*.cpp' --include='*.h' \
     graph_ir cache lowering executor runtime tracer targets; then
  echo "layering: a cast to a Program (programs are values, not cache entries)"; fail=1
fi
# Bytes become a linkable program in one place only, after a cache entry was
# verified for the key it was looked up under (runtime/program_entry.h).
if grep -rn "program_from_bytes" --include='*.cpp' --include='*.h' \
     graph_ir cache lowering executor runtime tracer bridge debug python tools targets |
     grep -vE "^(lowering/program_bytes|runtime/program_entry)\.(h|cpp):"; then
  echo "layering: program_from_bytes called outside runtime/program_entry.cpp (use link_entry on a VerifiedEntry)"; fail=1
fi
[ $fail -eq 0 ] && echo "layering: ok"
exit $fail
