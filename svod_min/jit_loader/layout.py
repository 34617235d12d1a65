"""Lay out a relocatable object as one image and relocate it for a base address.

The work splits in two:

* :func:`plan_layout` (base-independent, cached per object): place every
  ``SHF_ALLOC`` section by its flags into three page-aligned segments —
  text (read+execute; code, then call stubs), rodata (read-only; constants,
  then the GOT) and data (read-write; ``.data``, ``.bss``, COMMON) — and turn
  every relocation into a patch against an image offset, a resolved
  external, or an absolute value.
* :func:`apply_layout` (cheap): resolve externals, fill GOT slots and stubs,
  and patch the fields for a concrete ``base``.

Because GOT slots and stubs live inside the image, every PC-relative
displacement the compiler emitted stays within the image and fits.
"""

from __future__ import annotations

import importlib
import mmap
import operator
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Iterator, List, Mapping, NamedTuple, Optional, Tuple

from ..error import ElfFormatError, LoaderError, SymbolNotFoundError, UnsupportedRelocationError
from .arch import CALL, DIRECT, GOT, PLACE, TOC_BASE, Arch, RelocSpec, host_arch
from .elf import (
    MAX_ALIGN,
    SHF_ALLOC,
    SHF_EXECINSTR,
    SHF_TLS,
    SHF_WRITE,
    SHN_ABS,
    SHN_COMMON,
    SHN_LORESERVE,
    SHN_UNDEF,
    SHT_FINI_ARRAY,
    SHT_INIT_ARRAY,
    SHT_NOBITS,
    SHT_NULL,
    SHT_PREINIT_ARRAY,
    STB_LOCAL,
    STB_WEAK,
    STT_FILE,
    STT_FUNC,
    STT_GNU_IFUNC,
    STT_NOTYPE,
    STT_SECTION,
    ElfObject,
    Relocation,
    Section,
    Symbol,
    parse_object,
)
from .patch import GOT_OR_STUB, At, Patch, Ref, apply_field, pair_with_hi20, place_text, toc_only

#: ELF machine -> (module, its Arch): the architectures the relocator knows, in the order they are tried.
_ARCH_MODULES = {
    62: ("x86_64", "X86_64"),
    183: ("aarch64", "AARCH64"),
    243: ("riscv64", "RISCV64"),
    21: ("ppc64le", "PPC64LE"),
    258: ("loongarch64", "LOONGARCH64"),
}


class _Arches(Mapping[int, Arch]):
    """ELF machine -> :class:`Arch`, each architecture's module imported when its machine is first asked
    for: a process loads objects of its own machine, and the other four tables cost a start ~4 ms."""

    def __init__(self) -> None:
        self._loaded: Dict[int, Arch] = {}

    def __getitem__(self, machine: int) -> Arch:
        arch = self._loaded.get(machine)
        if arch is None:
            module, name = _ARCH_MODULES[machine]  # KeyError for a machine it does not know, as a dict's
            arch = getattr(importlib.import_module("." + module, __package__), name)
            if arch.machine != machine:
                raise LoaderError("%s.%s describes ELF machine %d, not %d" % (module, name, arch.machine, machine))
            self._loaded[machine] = arch
        return arch

    def __iter__(self) -> Iterator[int]:
        return iter(_ARCH_MODULES)

    def __len__(self) -> int:
        return len(_ARCH_MODULES)


ARCHES: Mapping[int, Arch] = _Arches()


def plain_types(arch: Arch) -> FrozenSet[int]:
    """The relocation types whose field, against a placed symbol, the layout writes straight into
    the template: the same at every base, P is the field itself, and no GOT, stub, TOC or HI20."""
    return frozenset(
        rtype
        for rtype, s in arch.relocs.items()
        if s.base_free
        and s.anchor == PLACE
        and not s.is_hi20
        and (s.via == DIRECT or s.via == CALL and arch.local_entry is None)
    )


_PLAIN_TYPES: Dict[int, FrozenSet[int]] = {}  # machine -> plain_types(ARCHES[machine]), filled on first use


def _plain_types_of(arch: Arch) -> FrozenSet[int]:
    """:func:`plain_types` of ``arch``, remembered for the architectures of :data:`ARCHES`."""
    if ARCHES.get(arch.machine) is not arch:  # a test's own Arch: never remembered
        return plain_types(arch)
    found = _PLAIN_TYPES.get(arch.machine)
    if found is None:
        found = _PLAIN_TYPES[arch.machine] = plain_types(arch)
    return found


#: Symbol types never exported by name (ifunc: refused when defined).
_UNNAMED_KINDS = frozenset((STT_SECTION, STT_FILE, STT_GNU_IFUNC))

PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
PAGE = max(mmap.PAGESIZE, 4096)
_HOST_ARCH = host_arch()

#: Largest image (code + data + zero-fill) an object may ask for. ``.bss`` and
#: COMMON sizes are not bounded by the file size, so without a limit a 64-byte
#: edit of a header could demand terabytes; big arrays belong in plan buffers.
MAX_IMAGE_BYTES = 256 << 20

Resolver = Callable[[str], int]


_Q = struct.Struct("<Q")


class Segment(NamedTuple):
    name: str  # "text", "rodata" or "data"
    offset: int
    size: int
    prot: int


@dataclass
class Layout:
    arch: Arch
    size: int
    template: bytes
    segments: List[Segment]
    sections: Dict[str, int]  # name -> image offset
    symbols: Dict[str, int]  # defined symbol -> image offset
    externals: Dict[str, bool]  # undefined name -> is weak
    code: FrozenSet[str] = frozenset()  # defined symbols that may be called: functions in executable sections
    got: List[Tuple[int, Ref, int]] = field(default_factory=list)  # (offset, ref, addend)
    stubs: List[Tuple[int, Ref, int]] = field(default_factory=list)
    patches: List[Patch] = field(default_factory=list)  # the fields that depend on the base

    @property
    def fixed(self) -> bool:
        """The template is the image at every base: nothing to resolve or patch per load."""
        return not (self.patches or self.got or self.stubs or self.externals)


@dataclass
class RelocatedImage:
    """The result of :func:`relocate`: bytes to place at ``base``, and where things are."""

    image: bytes
    base: int
    size: int
    sections: Dict[str, int]
    symbols: Dict[str, int]
    segments: List[Segment]


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) & ~(alignment - 1) if alignment > 1 else value


#: Section types whose code a loader must run (ELF gABI); this one runs none, so it refuses them.
_STARTUP_SECTIONS = {SHT_INIT_ARRAY: "constructors", SHT_PREINIT_ARRAY: "constructors", SHT_FINI_ARRAY: "destructors"}


def _segment_of(sec: Section) -> str:
    startup = _STARTUP_SECTIONS.get(sec.type) or ("constructors" if sec.name.startswith((".ctors", ".dtors")) else None)
    if startup:
        raise LoaderError(
            "section %s holds %s, which this loader never runs; kernels must not use them" % (sec.name, startup)
        )
    if sec.flags & SHF_TLS:
        raise UnsupportedRelocationError("section %s holds thread-local storage, not supported in kernels" % sec.name)
    if sec.flags & SHF_EXECINSTR and sec.flags & SHF_WRITE:
        raise LoaderError("section %s is both writable and executable; refusing it (W^X)" % sec.name)
    if sec.flags & SHF_EXECINSTR:
        return "text"
    return "data" if sec.flags & SHF_WRITE else "rodata"


class _Builder:
    """One pass over a parsed object producing a :class:`Layout`."""

    def __init__(self, obj: ElfObject, arch: Arch) -> None:
        self.obj = obj
        self.arch = arch
        self.offsets: Dict[int, int] = {}  # section index -> image offset
        self.common: Dict[int, int] = {}  # symbol index -> image offset
        self.got_keys: Dict[tuple, int] = {}
        self.stub_keys: Dict[tuple, int] = {}
        self.toc = 0  # image offset of the TOC base (architectures with a toc_symbol)
        self.stub_calls: List[Tuple[int, At]] = []  # (image offset, place) of calls through stubs
        self.checked: List[Tuple[Section, Relocation, RelocSpec, Symbol]] = []  # relocations that patch something

    # -- symbols -------------------------------------------------------------

    def _is_toc(self, sym: Symbol) -> bool:
        return sym.shndx == SHN_UNDEF and bool(sym.name) and sym.name == self.arch.toc_symbol

    def _is_external(self, sym: Symbol) -> bool:
        return sym.shndx in (SHN_UNDEF, SHN_ABS) and not self._is_toc(sym)

    def _ident(self, sym: Symbol) -> tuple:
        return ("ext", sym.name) if sym.shndx == SHN_UNDEF and not self._is_toc(sym) else ("sym", sym.index)

    def _ref(self, sym: Symbol, at: At) -> Ref:
        offset = self.offsets.get(sym.shndx)
        if offset is not None and sym.shndx < SHN_LORESERVE:  # the common case: a placed section
            return ("img", self._placed(sym, at))
        where = place_text(*at)
        if self._is_toc(sym):
            return ("img", self.toc)
        if sym.shndx == SHN_UNDEF:
            if not sym.name:
                raise ElfFormatError("relocation at %s uses an unnamed undefined symbol" % where)
            return ("ext", sym.name)
        if sym.shndx == SHN_ABS:
            return ("abs", sym.value)
        if sym.shndx == SHN_COMMON:
            return ("img", self.common[sym.index])
        if sym.shndx >= len(self.obj.sections):  # SHN_LORESERVE..: no meaning in a kernel object
            raise ElfFormatError(
                "relocation at %s refers to %s with reserved section index 0x%x"
                % (where, sym.name or "a symbol", sym.shndx)
            )
        if sym.shndx not in self.offsets:
            sec = self.obj.sections[sym.shndx]
            raise ElfFormatError(
                "relocation at %s refers to %s in section %s, which is not loaded (not SHF_ALLOC)"
                % (where, sym.name or "a symbol", sec.name)
            )
        return ("img", self._placed(sym, at))

    def _placed(self, sym: Symbol, at: Optional[At]) -> int:
        """Image offset of a symbol defined in a placed section (for the relocation at ``at``, or
        the symbol table when None); it must lie inside that section."""
        sec = self.obj.sections[sym.shndx]
        if sym.value > sec.size:
            raise ElfFormatError(
                "%s: symbol %s at offset 0x%x is outside section %s (%d bytes)"
                % (
                    "relocation at %s" % place_text(*at) if at else "symbol table",
                    sym.name or "#%d" % sym.index,
                    sym.value,
                    sec.name,
                    sec.size,
                )
            )
        return self.offsets[sym.shndx] + sym.value

    # -- relocation classification ------------------------------------------

    def _spec(self, rtype: int, where: str) -> Optional[RelocSpec]:
        if rtype in self.arch.none_types:
            return None
        spec = self.arch.relocs.get(rtype)
        if spec is not None:
            return spec
        if rtype in self.arch.refused:
            raise UnsupportedRelocationError(
                "%s (type %d) at %s: %s" % (self.arch.refused[rtype], rtype, where, self.arch.refuse_reason[rtype])
            )
        raise UnsupportedRelocationError("unknown %s relocation type %d at %s" % (self.arch.name, rtype, where))

    def _indirection_key(self, sym: Symbol, addend: int) -> tuple:
        return (self._ident(sym), addend if self.arch.addend_on_target else 0)

    def _collect_indirections(self) -> None:
        """Validate every relocation once, keep it with its spec, and number the GOT slots and stubs it needs."""
        symbols, sections, arch = self.obj.symbols, self.obj.sections, self.arch
        specs, checked = arch.relocs, self.checked
        for sec_index, relocs in self.obj.relocations.items():
            sec = sections[sec_index]
            size, nobits = sec.size, sec.type == SHT_NOBITS
            for rel in relocs:
                offset, rtype, sym_index, _addend = rel
                spec = specs.get(rtype)
                if spec is None:
                    spec = self._spec(rtype, place_text(sec.name, offset))
                    if spec is None:
                        continue
                if offset + spec.width > size:
                    raise ElfFormatError(
                        "%s field at %s runs past the end of %s" % (spec.name, place_text(sec.name, offset), sec.name)
                    )
                if nobits:
                    raise ElfFormatError(
                        "relocation at %s patches a section with no contents" % place_text(sec.name, offset)
                    )
                sym = symbols[sym_index]
                if sym.shndx == SHN_UNDEF and not sym.name and not toc_only(spec, sym_index):
                    raise ElfFormatError(
                        "relocation at %s uses an unnamed undefined symbol" % place_text(sec.name, offset)
                    )
                checked.append((sec, rel, spec, sym))
                if spec.via == GOT:
                    self.got_keys.setdefault(self._indirection_key(sym, rel.addend), len(self.got_keys))
                elif spec.via == CALL and self._is_external(sym):
                    self.stub_keys.setdefault(self._indirection_key(sym, rel.addend), len(self.stub_keys))

    # -- placement -----------------------------------------------------------

    def _place(self, sections: List[Section], cursor: int) -> int:
        offsets = self.offsets
        for sec in sections:
            align = sec.align or 1  # a power of two (checked when parsed)
            cursor = (cursor + align - 1) & -align
            offsets[sec.index] = cursor
            cursor += sec.size
        return cursor

    def _place_common(self, cursor: int) -> int:
        for sym in self.obj.symbols:
            if sym.shndx == SHN_COMMON:
                align = max(sym.value, 1)  # st_value is the alignment
                if align & (align - 1) or align > MAX_ALIGN:
                    raise ElfFormatError(
                        "COMMON symbol %s: alignment %d is not a power of two <= %d"
                        % (sym.name or sym.index, align, MAX_ALIGN)
                    )
                cursor = _align(cursor, align)
                self.common[sym.index] = cursor
                cursor += sym.size
        return cursor

    def build(self) -> Layout:
        self._collect_indirections()
        groups: Dict[str, List[Section]] = {"text": [], "rodata": [], "data": []}
        for sec in self.obj.sections:
            if sec.flags & SHF_ALLOC and sec.size > 0 and sec.type != SHT_NULL:
                groups[_segment_of(sec)].append(sec)
        # Within data, contents first and zero-fill (NOBITS) last.
        if len(groups["data"]) > 1:
            groups["data"].sort(key=lambda s: s.is_nobits)

        segments: List[Segment] = []
        cursor = self._place(groups["text"], 0)
        stub_base = _align(cursor, 16)
        text_end = cursor = stub_base + self.arch.stub_size * len(self.stub_keys)
        page = max(PAGE, self.arch.page_size)  # segments must be protectable on the target too

        # A small image keeps its constants and GOT on the code's one read+execute page (still never
        # writable and executable): one page and one mprotect per kernel instead of two. Anything
        # larger, or with a TOC, gets a read-only rodata segment of its own.
        cursor = self._place(groups["rodata"], text_end)
        got_base = _align(cursor, 8)
        cursor = got_base + 8 * len(self.got_keys)
        if cursor <= page and not self.arch.toc_symbol:
            segments.append(Segment("text", 0, cursor, PROT_READ | PROT_EXEC))
            return self._finish(segments, cursor, page, groups, got_base, stub_base)
        segments.append(Segment("text", 0, text_end, PROT_READ | PROT_EXEC))
        start = cursor = _align(text_end, page)
        cursor = self._place(groups["rodata"], cursor)
        got_base = _align(cursor, 8)
        cursor = got_base + 8 * len(self.got_keys)
        if self.arch.toc_symbol:
            # The GOT ends where the data segment begins, and the TOC base sits there: small-model
            # (16-bit) TOC offsets reach the whole GOT and the first 32 KiB of .toc/.data.
            cursor = _align(cursor, page)
            got_base = cursor - 8 * len(self.got_keys)
            self.toc = cursor
        segments.append(Segment("rodata", start, cursor - start, PROT_READ))
        return self._finish(segments, cursor, page, groups, got_base, stub_base)

    def _finish(
        self,
        segments: List[Segment],
        cursor: int,
        page: int,
        groups: Dict[str, List[Section]],
        got_base: int,
        stub_base: int,
    ) -> Layout:
        """Place the data segment after ``cursor``, then patches, template and names."""
        start = cursor = _align(cursor, page)
        cursor = self._place_common(self._place(groups["data"], cursor))
        segments.append(Segment("data", start, cursor - start, PROT_READ | PROT_WRITE))

        size = max(_align(cursor, page), page)
        if size > MAX_IMAGE_BYTES:
            raise LoaderError(
                "object needs a %d-byte image (largest section %s), over the %d-byte limit; "
                "pass large arrays as buffers instead of static data" % (size, self._largest(), MAX_IMAGE_BYTES)
            )
        image = self._contents(size)
        patches = self._patches(image, got_base, stub_base)
        symbols, code, externals = self._named_symbols()
        layout = Layout(
            arch=self.arch,
            size=size,
            template=bytes(image),
            segments=[s for s in segments if s.size > 0],
            sections=self._section_names(),
            symbols=symbols,
            externals=externals,
            code=code,
        )
        if self.got_keys:
            layout.got = [(got_base + 8 * i, *self._key_ref(k)) for k, i in self.got_keys.items()]
        if self.stub_keys:
            layout.stubs = [(stub_base + self.arch.stub_size * i, *self._key_ref(k)) for k, i in self.stub_keys.items()]
        layout.patches = patches
        return layout

    def _largest(self) -> str:
        sizes = [(s.size, s.name) for s in self.obj.sections if s.index in self.offsets]
        sizes += [(s.size, s.name) for s in self.obj.symbols if s.index in self.common]
        size, name = max(sizes) if sizes else (0, "-")
        return "%s, %d bytes" % (name or "?", size)

    def _key_ref(self, key: tuple) -> Tuple[Ref, int]:
        (kind, value), addend = key
        if kind == "ext":
            return ("ext", value), addend
        return self._ref(self.obj.symbols[value], GOT_OR_STUB), addend

    def _contents(self, size: int) -> bytearray:
        """The image before relocation: each placed section's bytes at its offset."""
        image = bytearray(size)
        data, sections = self.obj.data, self.obj.sections
        for index, off in self.offsets.items():
            sec = sections[index]
            if sec.type != SHT_NOBITS:
                image[off : off + sec.size] = data[sec.offset : sec.offset + sec.size]
        return image

    def _section_names(self) -> Dict[str, int]:
        names: Dict[str, int] = {}
        for index, off in sorted(self.offsets.items()):
            names.setdefault(self.obj.sections[index].name, off)
        return names

    def _named_symbols(self) -> Tuple[Dict[str, int], FrozenSet[str], Dict[str, bool]]:
        """One pass over the symbol table: defined name -> image offset; the names an entry point
        may have (functions or untyped labels inside placed executable sections); and the undefined
        names relocations use -> whether they are weak. A global overrides a local of the same name."""
        out: Dict[str, int] = {}
        code = []
        externals: Dict[str, bool] = {}
        global_names = set()
        offsets, sections, toc = self.offsets, self.obj.sections, self.arch.toc_symbol
        needed = {r.sym for rels in self.obj.relocations.values() for r in rels}
        for index, name, bind, kind, shndx, value, _size, _other in self.obj.symbols:
            if not name:
                continue
            if shndx == SHN_UNDEF:
                if index in needed and name != toc:
                    externals[name] = bind == STB_WEAK
                continue
            if kind in _UNNAMED_KINDS:
                if kind == STT_GNU_IFUNC:  # calling it would run its resolver
                    raise UnsupportedRelocationError(
                        "symbol %s is a GNU indirect function (ifunc), not supported in kernels" % name
                    )
                continue
            if shndx in offsets:
                sec = sections[shndx]
                if value > sec.size:
                    self._placed(self.obj.symbols[index], None)  # raises, naming the symbol
                value += offsets[shndx]
                if (kind == STT_FUNC or kind == STT_NOTYPE) and sec.flags & SHF_EXECINSTR:
                    code.append(name)
            elif shndx == SHN_COMMON:
                value = self.common[index]
            else:
                continue
            if bind != STB_LOCAL:
                global_names.add(name)
            elif name in global_names:  # a local after a global of its name (the table is out of order)
                continue
            out[name] = value
        return out, frozenset(code), externals

    def _patches(self, image: bytearray, got_base: int, stub_base: int) -> List[Patch]:
        """Patch into ``image`` every field that is the same at every base; return the others."""
        patches = []
        offsets, sections, arch = self.offsets, self.obj.sections, self.arch
        plain = _plain_types_of(arch)
        for sec, rel, spec, sym in self.checked:
            r_offset, rtype, _sym, addend = rel
            offset = offsets[sec.index] + r_offset
            _index, name, _bind, _kind, shndx, value, _size, _other = sym
            target = offsets.get(shndx)
            if rtype in plain and target is not None and shndx < SHN_LORESERVE:
                # The common case, without a Patch: a PC-relative field against a placed symbol.
                if value > sections[shndx].size:
                    self._placed(sym, (sec.name, r_offset))  # raises, naming the relocation
                apply_field(image, spec, offset, target + value, addend, offset, name, (sec.name, r_offset))
                continue
            patches.append(self._patch(sec, rel, spec, sym, offset, got_base, stub_base))
        if not patches:
            return patches
        fix = self.arch.after_stub_call
        if fix is not None:
            for off, at in self.stub_calls:
                fix(image, off, place_text(*at))
        fixed = [p for p in pair_with_hi20(patches) if p.spec.base_free and p.ref[0] == "img"]
        for p in fixed:
            p.apply(image, p.ref[1], 0)  # type: ignore[arg-type]
        return [p for p in patches if p not in fixed] if fixed else patches

    def _patch(
        self, sec: Section, rel: Relocation, spec: RelocSpec, sym: Symbol, offset: int, got_base: int, stub_base: int
    ) -> Patch:
        at = (sec.name, rel.offset)
        if toc_only(spec, rel.sym):  # R_PPC64_TOC: the TOC base itself, no symbol
            ref, addend = ("abs", 0), rel.addend  # type: Tuple[Ref, int]
        else:
            ref, addend = self._patch_target(spec, sym, rel.addend, got_base, stub_base, at)
        if spec.via == CALL and self._is_external(sym):
            self.stub_calls.append((offset, at))
        return Patch(offset, spec, ref, addend, at, sym.name, self.toc if spec.anchor == TOC_BASE else None)

    def _patch_target(
        self, spec: RelocSpec, sym: Symbol, addend: int, got_base: int, stub_base: int, at: At
    ) -> Tuple[Ref, int]:
        via = spec.via
        if via == GOT or via == CALL and self._is_external(sym):
            key = self._indirection_key(sym, addend)
            field_addend = 0 if self.arch.addend_on_target else addend
            if via == GOT:
                return ("img", got_base + 8 * self.got_keys[key]), field_addend
            return ("img", stub_base + self.arch.stub_size * self.stub_keys[key]), field_addend
        if via == CALL and self.arch.local_entry is not None and sym.type == STT_FUNC:
            addend += self.arch.local_entry(sym.other)  # caller and callee share one TOC
        return self._ref(sym, at), addend


_cache_lock = threading.Lock()
_layout_cache: "OrderedDict[bytes, Layout]" = OrderedDict()
_CACHE_LIMIT = 256


def plan_layout(obj: bytes, native: Optional[Callable[[bytes], Optional[Layout]]] = None) -> Layout:
    """Parse, validate and lay out ``obj`` (memoised per object contents).

    ``native`` (:mod:`.native_layout`'s planner) is tried first on a miss; when it declines the
    object, the layout is made here.
    """
    if not isinstance(obj, (bytes, bytearray, memoryview)):
        raise ElfFormatError("expected ELF object bytes, got %s" % type(obj).__name__)
    key = obj if isinstance(obj, bytes) else bytes(obj)
    with _cache_lock:
        hit = _layout_cache.get(key)
        if hit is not None:
            _layout_cache.move_to_end(key)
            return hit
    layout = native(key) if native is not None else None
    if layout is None:
        parsed = parse_object(key, tuple(ARCHES))
        layout = _Builder(parsed, ARCHES[parsed.machine]).build()
    with _cache_lock:
        _layout_cache[key] = layout
        while len(_layout_cache) > _CACHE_LIMIT:
            _layout_cache.popitem(last=False)
    return layout


def _resolve_externals(layout: Layout, resolve: Resolver) -> Dict[str, int]:
    resolved: Dict[str, int] = {}
    for name, weak in layout.externals.items():
        try:
            answer = resolve(name)
        except SymbolNotFoundError:
            if not weak:
                raise
            answer = 0
        address = _as_address(name, answer)  # a malformed answer is an error even for a weak symbol
        if not address:
            if not weak:
                raise SymbolNotFoundError("undefined symbol %r could not be resolved" % name)
            address = 0  # an unresolved weak symbol is null by definition
        resolved[name] = address
    return resolved


def _as_address(name: str, value: object) -> int:
    """A resolver's answer as an address: an integer in [0, 2**64), or None/0 for "none"."""
    if value is None:
        return 0
    try:
        address = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise SymbolNotFoundError("the resolver returned %r for %r, not an integer address" % (value, name)) from None
    if not 0 <= address < 1 << 64:
        raise SymbolNotFoundError("the resolver returned %d for %r, outside the 64-bit address space" % (address, name))
    return address


def _address(ref: Ref, base: int, resolved: Dict[str, int]) -> int:
    kind, value = ref
    if kind == "img":
        return base + value  # type: ignore[operator]
    if kind == "ext":
        return resolved[value]  # type: ignore[index]
    return value  # type: ignore[return-value]


def image_at(layout: Layout, base: int, resolve: Resolver) -> bytes:
    """The relocated image for ``base``: the template itself when nothing in it depends on the base."""
    return layout.template if layout.fixed else bytes(apply_layout(layout, base, resolve))


def apply_layout(layout: Layout, base: int, resolve: Resolver) -> bytearray:
    """Produce the relocated image of ``layout`` for load address ``base``."""
    # Natively, mmap's page is the one that counts (qemu-user runs ppc64le with 4 KiB pages); an
    # image relocated for another machine must also suit that machine's usual page.
    page = PAGE if layout.arch.name == _HOST_ARCH else max(PAGE, layout.arch.page_size)
    if base % page:
        raise LoaderError("load address 0x%x is not page-aligned (%s pages: %d bytes)" % (base, layout.arch.name, page))
    resolved = _resolve_externals(layout, resolve)
    image = bytearray(layout.template)
    for off, ref, addend in layout.got:
        _Q.pack_into(image, off, (_address(ref, base, resolved) + addend) & 0xFFFFFFFFFFFFFFFF)
    for off, ref, addend in layout.stubs:
        layout.arch.write_stub(image, off, _address(ref, base, resolved) + addend)
    for p in layout.patches:
        p.apply(image, _address(p.ref, base, resolved), base)
    return image


def relocate(obj: bytes, base: int, resolve: Resolver) -> RelocatedImage:
    """Lay out and relocate ``obj`` as if loaded at ``base``; a pure function.

    ``resolve(name)`` returns the address of an undefined symbol (0 or
    :class:`SymbolNotFoundError` when it has none).
    """
    layout = plan_layout(obj)
    image = apply_layout(layout, base, resolve)
    return RelocatedImage(
        image=bytes(image),
        base=base,
        size=layout.size,
        sections={k: base + v for k, v in layout.sections.items()},
        symbols={k: base + v for k, v in layout.symbols.items()},
        segments=list(layout.segments),
    )
