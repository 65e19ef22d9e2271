-- Reader notebooks (scripts/build/readers.py): Quarto's numbers, written out. Runs after
-- reader-callouts.lua and reader-diagrams.lua, before citeproc.
--
-- Numbers follow Quarto's rules for a book with `crossref: chapters: true`: the converter
-- passes this file's chapter number ("1", or "A" for an appendix, or "" when unnumbered);
-- sections, figures, tables and equations are numbered within it in reading order.
-- Headings get their number and an anchor named after their label; figures and tables get
-- "Figure 1.3: caption" (under a figure, above a table); a labelled equation gets \tag.
-- Then every @sec-/@fig-/@tbl-/@eq- reference becomes the book's words ("Section 1.4",
-- "Figure 1.3", "Appendix A") linked to the anchor, on this page or in the rendered book.
--
-- READER_MODE=collect prints only this file's labels and their words, as JSON, so that the
-- converter learns every label of the book before it converts (READER_TARGETS).

local MODE = os.getenv("READER_MODE") or "convert"
local PAGE = os.getenv("READER_PAGE") or ""
local CHAPTER = os.getenv("READER_CHAPTER") or ""
local APPENDIX = os.getenv("READER_APPENDIX") == "1"
local BOOK_URL = os.getenv("READER_BOOK_URL") or ""
local KNOWN = pandoc.json.decode(os.getenv("READER_TARGETS") or "{}", false)

local WORDS = { sec = "Section", fig = "Figure", tbl = "Table", eq = "Equation" }
local targets = {} -- this file's labels: { text = "Figure 1.3", page = PAGE }
local sections = {}
local counts = {}
local seen_title = false
local cell = nil -- the notebook cell being read, for error messages

local function fail(message)
  local where = cell and ("cell " .. cell .. ": ") or ""
  error("READER-ERROR: " .. where .. message, 0)
end

local function record(label, text)
  if label == "" then
    return
  end
  if targets[label] then
    fail("the label " .. label .. " is defined twice")
  end
  targets[label] = { text = text, page = PAGE }
end

-- Count a figure, table or equation; return its words ("Figure 1.3") and number ("1.3").
local function count(kind, label)
  counts[kind] = (counts[kind] or 0) + 1
  local number = tostring(counts[kind])
  if CHAPTER ~= "" then
    number = CHAPTER .. "." .. number
  end
  record(label, WORDS[kind] .. " " .. number)
  return WORDS[kind] .. " " .. number, number
end

local function anchor(label)
  return pandoc.RawBlock("html", '<div id="' .. label .. '"></div>')
end

local function caption(words, inlines)
  local line = pandoc.Inlines(words .. ":")
  line:insert(pandoc.Space())
  line:extend(inlines)
  return pandoc.Para(line)
end

local function kind_of(label)
  local kind = label:match("^(%a+)%-")
  return WORDS[kind or ""] and kind or nil
end

-- --------------------------------------------------------------------------- numbering

local function number_heading(header)
  local label = header.identifier
  local numbered = not header.classes:includes("unnumbered")
  local title = pandoc.utils.stringify(header.content)
  local number = nil
  if header.level == 1 then
    if seen_title then
      fail("a chapter has one level-1 heading, its title; found another: '" .. title .. "'")
    end
    seen_title = true
    if numbered and CHAPTER ~= "" then
      number = APPENDIX and ("Appendix " .. CHAPTER .. " —") or CHAPTER
      record(label, (APPENDIX and "Appendix " or "Chapter ") .. CHAPTER)
    else
      record(label, title)
    end
  elseif numbered and CHAPTER ~= "" then
    local depth = header.level - 1
    for index = #sections, depth + 1, -1 do
      sections[index] = nil
    end
    for index = #sections + 1, depth do
      sections[index] = 0
    end
    sections[depth] = sections[depth] + 1
    number = CHAPTER .. "." .. table.concat(sections, ".")
    record(label, "Section " .. number)
  else
    record(label, title)
  end
  local content = pandoc.Inlines({})
  if number then
    content:extend(pandoc.Inlines(number .. " "))
  end
  content:extend(header.content)
  if label ~= "" then
    content:insert(pandoc.RawInline("html", '<a id="' .. label .. '"></a>'))
  end
  return pandoc.Header(header.level, content)
end

-- The `#|` option lines at the top of a code cell, read as the YAML they are, so that a
-- caption is markdown (with its references) and may span lines.
local function cell_options(text)
  local yaml = {}
  for line in (text .. "\n"):gmatch("(.-)\n") do
    if line:sub(1, 2) == "#|" then
      table.insert(yaml, line:sub(4))
    end
  end
  return pandoc.read("---\n" .. table.concat(yaml, "\n") .. "\n---\n", "markdown").meta
end

local function meta_inlines(value)
  if value == nil then
    return pandoc.Inlines({})
  end
  return pandoc.utils.type(value) == "Inlines" and value or pandoc.Inlines(
    pandoc.utils.stringify(value))
end

-- A code cell whose figure or table is labelled gets a caption cell: after the figure,
-- before the table, named after the code cell.
local function number_code_cell(div)
  local code = div.content[1]
  local found = code and code.t == "CodeBlock" and cell_options(code.text) or {}
  local label = found.label and pandoc.utils.stringify(found.label) or ""
  local kind = kind_of(label)
  if kind ~= "fig" and kind ~= "tbl" then
    return nil
  end
  local words = count(kind, label)
  local inlines = meta_inlines(found[kind .. "-cap"])
  local captioned = pandoc.Div({ anchor(label), caption(words, inlines) },
    pandoc.Attr(div.identifier .. "-caption", { "cell", "markdown" }))
  if kind == "fig" then
    return { div, captioned }
  end
  return { captioned, div }
end

-- `::: {#fig-x}` content, then its caption as the last paragraph.
local function number_div(div)
  local kind = kind_of(div.identifier)
  if kind ~= "fig" and kind ~= "tbl" then
    return nil
  end
  local words = count(kind, div.identifier)
  local content = pandoc.List({ table.unpack(div.content, 1, #div.content - 1) })
  local last = div.content[#div.content]
  local line = caption(words, last and last.content or pandoc.Inlines({}))
  local blocks = pandoc.List({ anchor(div.identifier) })
  if kind == "tbl" then
    blocks:insert(line)
    blocks:extend(content)
  else
    blocks:extend(content)
    blocks:insert(line)
  end
  return blocks
end

-- A figure or table labelled in its own attributes: its words and its caption's text.
local function labelled(element, kind)
  if kind_of(element.identifier) ~= kind then
    return nil, nil
  end
  return count(kind, element.identifier), pandoc.utils.blocks_to_inlines(element.caption.long)
end

local function number_figure(figure)
  local words, text = labelled(figure, "fig")
  if words == nil then return nil end
  local image = pandoc.utils.blocks_to_inlines(figure.content)[1]
  image.attr = pandoc.Attr()
  return { anchor(figure.identifier), pandoc.Para({ image }), caption(words, text) }
end

local function number_table(tbl)
  local words, text = labelled(tbl, "tbl")
  if words == nil then return nil end
  local label = tbl.identifier
  tbl.identifier = ""
  tbl.caption = { long = {} }
  return { anchor(label), caption(words, text), tbl }
end

-- `$$ ... $$ {#eq-x}`: pandoc reads the label as text after the display math.
local function number_equation(para)
  local inlines = para.content
  for index, inline in ipairs(inlines) do
    local after = inlines[index + 1]
    if after and after.t == "Space" then
      after = inlines[index + 2]
    end
    local label = after and after.t == "Str" and after.text:match("^{#(eq%-[^%s{}]+)}$")
    if inline.t == "Math" and inline.mathtype == "DisplayMath" and label then
      local _, number = count("eq", label)
      inline.text = inline.text:gsub("%s*$", "") .. " \\tag{" .. number .. "}\n"
      local kept = pandoc.Inlines({ table.unpack(inlines, 1, index) })
      return { anchor(label), pandoc.Para(kept) }
    end
  end
  return nil
end

-- Remember the notebook cell being read, for error messages; true for a notebook cell.
local function enter(div)
  if div.classes:includes("cell") then
    cell = div.identifier
    return true
  end
  return false
end

local numbering = {
  traverse = "topdown",
  Div = function(div)
    if not enter(div) then
      return number_div(div)
    elseif div.classes:includes("code") then
      return number_code_cell(div), false
    end
  end,
  Header = number_heading,
  Figure = number_figure,
  Table = number_table,
  Para = number_equation,
}

-- --------------------------------------------------------------------------- references

local function link(label)
  local target = targets[label] or KNOWN[label]
  if target == nil then
    fail("@" .. label .. " refers to a label the book does not have")
  end
  if target.page == PAGE then
    return target.text, "#" .. label
  end
  return target.text, BOOK_URL .. target.page:gsub("%.%w+$", ".html") .. "#" .. label
end

local function resolve(cite)
  local crossrefs = 0
  for _, citation in ipairs(cite.citations) do
    if kind_of(citation.id) then
      crossrefs = crossrefs + 1
    end
  end
  if crossrefs == 0 then
    return nil -- a citation of a work, for citeproc
  end
  if crossrefs < #cite.citations then
    fail("a bracket mixes cross-references and citations: " .. pandoc.utils.stringify(cite))
  end
  if MODE == "collect" then
    return pandoc.Inlines({})
  end
  local out = pandoc.Inlines({})
  for index, citation in ipairs(cite.citations) do
    if index > 1 then
      out:extend({ pandoc.Str(","), pandoc.Space() })
    end
    local words, href = link(citation.id:lower())
    if citation.mode == "SuppressAuthor" then
      words = words:match("^%S+ (.+)$") or words
    end
    if #citation.prefix > 0 then
      out:extend(citation.prefix)
      out:insert(pandoc.Space())
    end
    out:insert(pandoc.Link(pandoc.Inlines(words), href))
    out:extend(citation.suffix)
  end
  return out
end

local references = {
  traverse = "topdown",
  Div = function(div)
    enter(div)
  end,
  Cite = resolve,
  Pandoc = function(doc)
    if MODE == "collect" then
      return pandoc.Pandoc({ pandoc.RawBlock("markdown", pandoc.json.encode(targets)) })
    end
  end,
}

return { numbering, references }
