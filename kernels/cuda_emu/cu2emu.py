#!/usr/bin/env python3
"""cu2emu: rewrites a CUDA source file into host C++ for pb_emu, mechanically.

Usage: cu2emu.py INPUT.cu OUTPUT.cpp

Only what a host compiler cannot take is rewritten, and line numbers are kept
(`#line` names the original file), so diagnostics, sanitizer reports and
emulator messages point at the .cu source:

  kernel<<<g, b, s, st>>>(args)
      -> ::pb_emu::LaunchConfig(g, b, s, st).launch("kernel", [](auto&&... a) { kernel(a...); })(args)
  __shared__ [__align__(N)] T name[d1][d2];   -> PB_EMU_SHARED(T, name, [d1][d2], N);
  extern __shared__ [__align__(N)] T name[];  -> PB_EMU_DYNAMIC_SMEM(T, name, N);
  the first statement of every __global__ function
      -> PB_EMU_KERNEL_ENTRY("kernel", &kernel<template args>, launch-bounds threads);
  reinterpret_cast<void*>(&kernel<...>)       -> ::pb_emu::kernel_handle(&kernel<...>)
  asm [volatile]("op.q1.q2 {%0, %1}, [%2];" : outs : ins [: clobbers])
      -> ::pb_emu::ptx::op_q1_q2(operands in the order the template names them)
         (special registers such as %%globaltimer are appended: mov_u64__globaltimer)

Anything it cannot rewrite safely (a multi-instruction asm block, several
__shared__ declarators in one statement) stops the build with the file and line.
"""
import os
import re
import sys


class RewriteError(Exception):
    pass


def mask_source(src):
    """The source with comments and string/char literal contents blanked (same length),
    so that searches never match inside them."""
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = ' '
            i = j
        elif src.startswith('/*', i):
            j = src.find('*/', i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != '\n':
                    out[k] = ' '
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == '\\' else 1
            for k in range(i + 1, min(j, n)):
                if out[k] != '\n':
                    out[k] = ' '
            i = j + 1
        else:
            i += 1
    return ''.join(out)


def line_of(src, pos):
    return src.count('\n', 0, pos) + 1


def match_forward(mask, i, open_ch, close_ch):
    """Index just past the bracket closing the one at mask[i]."""
    assert mask[i] == open_ch
    depth = 0
    for j in range(i, len(mask)):
        if mask[j] == open_ch:
            depth += 1
        elif mask[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    raise RewriteError('unbalanced %s' % open_ch)


def match_angle_backward(mask, i):
    """mask[i] is '>' closing a template argument list: the index of its '<'
    (parentheses inside the list are skipped)."""
    depth, paren = 0, 0
    for j in range(i, -1, -1):
        c = mask[j]
        if c == ')':
            paren += 1
        elif c == '(':
            paren -= 1
        elif paren == 0 and c == '>':
            depth += 1
        elif paren == 0 and c == '<':
            depth -= 1
            if depth == 0:
                return j
    raise RewriteError('unbalanced template argument list')


def split_top(text, sep):
    """Split at `sep` outside brackets and string literals."""
    parts, depth, cur, quote = [], 0, '', None
    for ch in text:
        if quote:
            cur += ch
            if ch == quote:
                quote = None
            continue
        if ch in '"\'':
            quote = ch
        elif ch in '([{<':
            depth += 1
        elif ch in ')]}>':
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(cur)
            cur = ''
            continue
        cur += ch
    parts.append(cur)
    return parts


def keep_lines(original, replacement):
    """The replacement, padded with the newlines the original spanned."""
    missing = original.count('\n') - replacement.count('\n')
    if missing < 0:
        raise RewriteError('a rewrite would add lines')
    return replacement + '\n' * missing


IDENT_TAIL = re.compile(r'[A-Za-z_][\w]*(?:::[A-Za-z_]\w*)*$')


def callee_before(mask, end):
    """The expression naming the kernel that ends just before `end` (skipping blanks):
    an identifier, possibly qualified, possibly with template arguments."""
    j = end
    while j > 0 and mask[j - 1].isspace():
        j -= 1
    stop = j
    if mask[j - 1] == '>':
        j = match_angle_backward(mask, j - 1)
    m = IDENT_TAIL.search(mask[:j])
    if not m:
        raise RewriteError('cannot find the kernel name of a <<<...>>> launch')
    return m.start(), stop, m.group(0).split('::')[-1]


def template_args_before(mask, src, gpos):
    """For a __global__ at gpos: '<A, B>' when a template header precedes it, else ''."""
    j = gpos
    while j > 0 and mask[j - 1].isspace():
        j -= 1
    if j == 0 or mask[j - 1] != '>':
        return ''
    lt = match_angle_backward(mask, j - 1)
    head = mask[:lt].rstrip()
    if not head.endswith('template'):
        return ''
    names = []
    for param in split_top(src[lt + 1:j - 1], ','):
        param = param.split('=')[0].strip()
        if not param:
            continue
        pack = '...' in param
        m = re.search(r'([A-Za-z_]\w*)\s*$', param.replace('...', ' '))
        if not m:
            raise RewriteError('cannot read template parameter %r' % param)
        names.append(m.group(1) + ('...' if pack else ''))
    return '<' + ', '.join(names) + '>'


def ptx_instruction(instr, operands):
    """One PTX instruction (no trailing ';') as a call of its pb_emu::ptx function:
    the opcode with its qualifiers joined by '_', the operands in the order the template
    names them: %N is the asm operand N, '_' the sink (a destination nobody reads),
    a literal (0., 16, 0x1f) itself; special registers (%%laneid) end the name."""
    opcode, _, rest = instr.strip().partition(' ')
    specials = re.findall(r'%%(\w+)', rest)
    fn = re.sub(r'[^0-9A-Za-z]', '_', opcode) + ''.join('__' + s for s in specials)
    args = []
    for tok in re.split(r'[\s,{}\[\]]+', re.sub(r'%%\w+', ' ', rest)):
        if not tok:
            continue
        mo = re.fullmatch(r'%(\d+)', tok)
        if mo:
            k = int(mo.group(1))
            if k >= len(operands):
                raise RewriteError('asm names an operand it does not have')
            args.append(operands[k])
        elif tok == '_':
            args.append('::pb_emu::ptx::sink')
        elif re.fullmatch(r'[-+]?(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?[fF]?|\.\d+)', tok):
            args.append(tok + ('0' if tok.endswith('.') else ''))
        else:
            raise RewriteError('asm operand %r is neither %%N, _ nor a literal' % tok)
    return '::pb_emu::ptx::%s(%s)' % (fn, ', '.join(args))


def ptx_call(template, operands):
    """The C++ expression for an asm statement's template: one instruction, optionally in
    a { } scope, or the one multi-instruction form libraries use to predicate an
    instruction on a C++ value:
        { .reg .pred p; setp.ne.b32 p, %K, 0; @p INSTR; }  ->  (%K != 0 ? INSTR : void())
    Anything else (loops, labels, other predicates) is refused."""
    text = template.strip()
    if text.startswith('{') and text.endswith('}'):
        text = text[1:-1]
    instrs = [i.strip() for i in text.split(';') if i.strip()]
    if len(instrs) == 1:
        if instrs[0].startswith(('.', '@', '{')):
            raise RewriteError('asm form not emulated: %r' % template)
        return ptx_instruction(instrs[0], operands)
    if len(instrs) == 3:
        m1 = re.fullmatch(r'\.reg\s+\.pred\s+(\w+)', instrs[0])
        m2 = re.fullmatch(r'setp\.ne\.b32\s+(\w+)\s*,\s*%(\d+)\s*,\s*0', instrs[1])
        m3 = re.fullmatch(r'@(\w+)\s+(.*)', instrs[2], re.S)
        if m1 and m2 and m3 and m1.group(1) == m2.group(1) == m3.group(1):
            k = int(m2.group(2))
            if k >= len(operands):
                raise RewriteError('asm names an operand it does not have')
            return '((%s) != 0 ? %s : void())' % (operands[k], ptx_instruction(m3.group(2), operands))
    raise RewriteError('asm with more than one instruction; keep inline PTX to one instruction per '
                       'named helper (or add its form to cu2emu.py\'s ptx_call): %r' % ' '.join(template.split()))


def rewrite(src, path):
    mask = mask_source(src)
    edits = []  # (start, end, replacement)

    # Kernels: entry statement, and their names (for kernel handles).
    kernels = set()
    for m in re.finditer(r'\b__global__\b', mask):
        i = m.end()
        rest = mask[i:]
        mv = re.match(r'\s*void\s+', rest)
        if not mv:
            continue
        i += mv.end()
        bound = '0'
        mb = re.match(r'__launch_bounds__\s*\(', mask[i:])
        if mb:
            close = match_forward(mask, i + mb.end() - 1, '(', ')')
            bound = split_top(src[i + mb.end():close - 1], ',')[0].strip()
            i = close
            while mask[i].isspace():
                i += 1
        mn = re.match(r'([A-Za-z_]\w*)\s*\(', mask[i:])
        if not mn:
            raise RewriteError('%s:%d: cannot read the kernel name after __global__' % (path, line_of(src, m.start())))
        name = mn.group(1)
        kernels.add(name)
        close = match_forward(mask, i + mn.end() - 1, '(', ')')
        k = close
        while k < len(mask) and mask[k].isspace():
            k += 1
        if k >= len(mask) or mask[k] != '{':
            continue  # a declaration
        targs = template_args_before(mask, src, m.start())
        edits.append((k + 1, k + 1, ' PB_EMU_KERNEL_ENTRY("%s", (&%s%s), (%s));' % (name, name, targs, bound)))

    # Launches.
    for m in re.finditer(r'<<<', mask):
        start, _, name = callee_before(mask, m.start())
        cfg_end = mask.find('>>>', m.end())
        if cfg_end < 0:
            raise RewriteError('%s:%d: <<< without >>>' % (path, line_of(src, m.start())))
        callee = src[start:m.start()].strip()
        config = src[m.end():cfg_end].strip()
        replacement = '::pb_emu::LaunchConfig(%s).launch("%s", [](auto&&... pb_emu_a) { %s(pb_emu_a...); })' % (
            config, name, ' '.join(callee.split()))
        edits.append((start, cfg_end + 3, keep_lines(src[start:cfg_end + 3], replacement)))

    # Shared memory.
    for m in re.finditer(r'\b__shared__\b', mask):
        decl_start = m.start()
        before = mask[:decl_start].rstrip()
        dynamic = before.endswith('extern')
        if dynamic:
            decl_start = len(before) - len('extern')
        end = mask.find(';', m.end())
        decl = src[m.end():end]
        align = None
        ma = re.search(r'__align__\s*\(\s*([^)]*?)\s*\)', decl)
        if ma:
            align = ma.group(1)
            decl = decl[:ma.start()] + decl[ma.end():]
        if len(split_top(decl, ',')) > 1 or '=' in decl:
            raise RewriteError('%s:%d: one __shared__ declarator per statement, without an initialiser' % (
                path, line_of(src, m.start())))
        md = re.match(r'\s*(.+?)\s+([A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*)$', decl, re.S)
        if not md:
            raise RewriteError('%s:%d: cannot read the __shared__ declaration' % (path, line_of(src, m.start())))
        typ, name, dims = ' '.join(md.group(1).split()), md.group(2), ''.join(md.group(3).split())
        if align is None:
            align = 'alignof(%s)' % typ
        if dynamic:
            if dims != '[]':
                raise RewriteError('%s:%d: extern __shared__ must be an unsized array' % (path, line_of(src, m.start())))
            replacement = 'PB_EMU_DYNAMIC_SMEM(%s, %s, %s);' % (typ, name, align)
        else:
            replacement = 'PB_EMU_SHARED(%s, %s, %s, %s);' % (typ, name, dims, align)
        edits.append((decl_start, end + 1, keep_lines(src[decl_start:end + 1], replacement)))

    # Kernel addresses.
    for m in re.finditer(r'reinterpret_cast\s*<\s*(?:const\s+)?void\s*\*\s*>\s*\(', mask):
        close = match_forward(mask, m.end() - 1, '(', ')')
        inner = src[m.end():close - 1].strip()
        base = re.match(r'&?\s*([A-Za-z_]\w*)', inner)
        if base and base.group(1) in kernels:
            edits.append((m.start(), close, keep_lines(src[m.start():close], '::pb_emu::kernel_handle(%s)' % inner)))

    # Launches by address with a C-style cast, cudaLaunchKernel((void*)kernel, ...): the
    # kernel's handle, as for reinterpret_cast above; and cudaLaunchKernelEx (the runtime's
    # C++ template, which casts the kernel to an address the emulation cannot call).
    for m in re.finditer(r'(?<![\w.:])cudaLaunchKernel\s*\(', mask):
        close = match_forward(mask, m.end() - 1, '(', ')')
        first = split_top(mask[m.end():close - 1], ',')[0]
        mc = re.match(r'\s*\(\s*(?:const\s+)?void\s*\*\s*\)\s*', first)
        if mc:
            a, b = m.end(), m.end() + len(first)
            inner = src[a + mc.end():b].strip()
            edits.append((a, b, keep_lines(src[a:b], '::pb_emu::kernel_handle(%s)' % inner)))
    for m in re.finditer(r'(?<![\w.:])cudaLaunchKernelEx(?=\s*\()', mask):
        edits.append((m.start(), m.end(), '::pb_emu::launch_kernel_ex'))

    # What nvcc's front end accepts and a host compiler does not (FlashInfer's headers):
    # a dependent member template called without `template`.
    for m in re.finditer(r'>::cast<(?:vec_size|\d+)>\(', mask):
        edits.append((m.start() + 3, m.start() + 3, 'template '))
    # (smem_t's member templates called on a dependent smem_t: qo_smem.get_permuted_offset<N>(...))
    for m in re.finditer(r'(?<!template)(\.|->)\s*(?=(?:get_permuted_offset|advance_offset_by_column|'
                         r'advance_offset_by_row|load_128b_async)\s*<)', mask):
        edits.append((m.end(), m.end(), 'template '))

    # The target architecture and compiler version a library's preprocessor tests read:
    # the emulated device's (pb_emu.hpp), since a host compiler defines neither.
    for m in re.finditer(r'\b(__CUDA_ARCH__|__CUDACC_VER_MAJOR__|__CUDACC_VER_MINOR__)\b', mask):
        edits.append((m.start(), m.end(), 'PB_EMU_' + m.group(1).strip('_')))

    # Inline PTX.
    for m in re.finditer(r'\b(?:asm|__asm__)\b(\s+(?:volatile|__volatile__))?\s*\(', mask):
        close = match_forward(mask, m.end() - 1, '(', ')')
        body = src[m.end():close - 1]
        parts = split_top(body, ':')
        template = ''.join(re.findall(r'"((?:[^"\\]|\\.)*)"', parts[0])).replace('\\n', '\n').replace('\\t', ' ')
        operands = []
        for section in parts[1:3]:
            for op in split_top(section, ','):
                op = op.strip()
                if op:
                    operands.append(re.sub(r'^"[^"]*"\s*', '', op).strip())
        try:
            call = ptx_call(template, operands)
        except RewriteError as e:
            raise RewriteError('%s:%d: %s' % (path, line_of(src, m.start()), e))
        edits.append((m.start(), close, keep_lines(src[m.start():close], call)))

    edits.sort(key=lambda e: e[0])
    for a, b in zip(edits, edits[1:]):
        if b[0] < a[1]:
            raise RewriteError('%s:%d: overlapping rewrites' % (path, line_of(src, b[0])))
    out = src
    for start, end, rep in reversed(edits):
        out = out[:start] + rep + out[end:]
    assert out.count('\n') == src.count('\n'), 'line count changed'
    return '#line 1 "%s"\n' % path + out


# Synchronisation a library omits where the GPU does not need it for the result, and the
# emulation does: each entry is the file (relative to the library's include root), the
# exact source text (once in the file) and the call that goes before it, on the same line
# (line numbers are kept). A text no longer found stops the build: a new version of the
# library must be looked at again. Each is a finding about the library, kept in its
# comment; the race check (counting build) reports each one without its entry.
LIBRARY_SYNCS = [
    # FlashInfer 0.6.9 prefill, write_o_reg_gmem (sm_80 path, without stmatrix), called by
    # every thread of the block right after threadblock_sync_mdo_states:
    # (1) With NUM_WARPS_KV > 1, every warp reads all warps' partial outputs from
    #     cta_sync_o_smem, and warp 0 then writes its output tile to qo_smem, which
    #     shares the union's first bytes with cta_sync_o_smem, with no barrier between:
    #     the other warps may read what warp 0 wrote. They compute the same result as warp
    #     0 and discard it (only warp 0 writes O and LSE), so the race is benign on the
    #     GPU; the barrier here keeps the race check on for the rest of the kernel. It
    #     also orders warp 0's own lanes, which read cta_sync_o_smem and then write over
    #     it: the GPU runs them converged, the emulation's fibers one lane at a time.
    ('flashinfer/attention/prefill.cuh',
     'if (get_warp_idx_kv<KTraits>(tid.z) == 0) {\n#pragma unroll\n'
     '      for (uint32_t mma_q = 0; mma_q < KTraits::NUM_MMA_Q; ++mma_q) {\n#pragma unroll\n'
     '        for (uint32_t mma_d = 0; mma_d < KTraits::NUM_MMA_D_VO; ++mma_d) {\n'
     '          uint32_t o_frag_f16[8 / 2];',
     '__syncthreads(); '),
    # (2) Each lane of warp 0 stores its output fragment to qo_smem, then copies 16-byte
    #     rows that other lanes wrote out to global memory, with no __syncwarp between
    #     (CUDA asks for one since Volta; the GPU runs the warp converged here, which
    #     FlashInfer counts on; the emulation's fibers run one lane at a time).
    ('flashinfer/attention/prefill.cuh',
     'uint32_t o_smem_offset_w = o_smem->template get_permuted_offset<UPCAST_STRIDE_O>(\n'
     '          warp_idx_x * KTraits::NUM_MMA_Q * 16 + lane_idx / 8, lane_idx % 8);',
     '__syncwarp(); '),
]


def apply_library_syncs(src, rel):
    for path, anchor, insert in LIBRARY_SYNCS:
        if os.path.normpath(path) != os.path.normpath(rel):
            continue
        if src.count(anchor) != 1:
            raise RewriteError('%s: the text before which cu2emu.py inserts %r is not there exactly once '
                               '(a new version of the library? see LIBRARY_SYNCS)' % (rel, insert.strip()))
        src = src.replace(anchor, insert + anchor)
    return src


def rewrite_tree(root, out_root, entries):
    """Rewrites the entry headers of a library's include tree `root` (paths relative to
    it) and every file they include with a quoted #include, transitively, into the same
    place under `out_root`, where the includes (relative to their includer) find the
    rewritten copies. Returns the relative paths written."""
    todo, seen = list(entries), set()
    while todo:
        rel = os.path.normpath(todo.pop())
        if rel in seen:
            continue
        seen.add(rel)
        with open(os.path.join(root, rel)) as f:
            src = f.read()
        for inc in re.findall(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', src, re.M):
            cand = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            if os.path.exists(os.path.join(root, cand)) and not cand.startswith('..'):
                todo.append(cand)
        # A library's header stays a system header (GCC's line marker, flag 3): its own
        # warnings are not ours to fix, as where it is installed.
        out = rewrite(apply_library_syncs(src, rel), os.path.join(root, rel))
        out = '# 1 "%s" 3\n' % os.path.join(root, rel) + out.split('\n', 1)[1]
        dst = os.path.join(out_root, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        old = None
        if os.path.exists(dst):
            with open(dst) as f:
                old = f.read()
        if old != out:  # unchanged files keep their time stamps (no needless recompiles)
            with open(dst, 'w') as f:
                f.write(out)
    return sorted(seen)


def main():
    if len(sys.argv) >= 5 and sys.argv[1] == '--tree':
        root, out_root, stamp, entries = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
        try:
            written = rewrite_tree(root, out_root, entries)
        except (RewriteError, OSError) as e:
            sys.stderr.write('cu2emu: %s\n' % e)
            return 1
        with open(stamp, 'w') as f:
            f.write(''.join(w + '\n' for w in written))
        return 0
    if len(sys.argv) != 3:
        sys.stderr.write('usage: cu2emu.py INPUT.cu OUTPUT.cpp\n'
                         '       cu2emu.py --tree ROOT OUT_ROOT STAMP ENTRY...\n')
        return 2
    path, out_path = sys.argv[1], sys.argv[2]
    with open(path) as f:
        src = f.read()
    try:
        out = rewrite(src, path)
    except RewriteError as e:
        sys.stderr.write('cu2emu: %s\n' % e)
        return 1
    # An unchanged output keeps its time stamp (CMake's Ninja rules restat custom
    # commands): a change to this script recompiles only the files it changes.
    if os.path.exists(out_path):
        with open(out_path) as f:
            if f.read() == out:
                return 0
    with open(out_path, 'w') as f:
        f.write(out)
    return 0


if __name__ == '__main__':
    sys.exit(main())
