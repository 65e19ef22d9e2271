-- Reader notebooks (scripts/build/readers.py): a diagram, written ```{mermaid} for Quarto (the
-- converter spells it ```{.mermaid} for pandoc), becomes a plain ```mermaid fence, which
-- JupyterLab 4.1 and later draw. Its %%| options go. A labelled diagram becomes a figure
-- div with its caption last, which reader-crossref.lua numbers as Quarto does, followed by
-- a link to the figure drawn in the rendered book, for Colab, which shows mermaid as text.

local PAGE = os.getenv("READER_PAGE") or ""
local BOOK_URL = os.getenv("READER_BOOK_URL") or ""

-- A diagram's `%%|` option lines read as the YAML they are, and the diagram without them.
local function options(text)
  local yaml, rest = {}, {}
  for line in (text .. "\n"):gmatch("(.-)\n") do
    if line:sub(1, 3) == "%%|" then
      table.insert(yaml, line:sub(5))
    else
      table.insert(rest, line)
    end
  end
  local meta = pandoc.read("---\n" .. table.concat(yaml, "\n") .. "\n---\n", "markdown").meta
  return meta, table.concat(rest, "\n"):gsub("%s+$", "")
end

function CodeBlock(block)
  if not block.classes:includes("mermaid") then
    return nil
  end
  local found, diagram = options(block.text)
  local fence = pandoc.CodeBlock(diagram, pandoc.Attr("", { "mermaid" }))
  local label = found.label and pandoc.utils.stringify(found.label) or ""
  if not label:match("^fig%-") then
    return fence
  end
  local caption = pandoc.Para(found["fig-cap"] or {})
  local figure = pandoc.Div({ fence, caption }, pandoc.Attr(label))
  local page = PAGE:gsub("%.%w+$", ".html")
  local drawn = pandoc.Link("the rendered book", BOOK_URL .. page .. "#" .. label)
  local note = pandoc.Inlines("Where the diagram above shows as text, as on Colab, see it "
    .. "drawn in ")
  note:extend({ drawn, pandoc.Str(".") })
  return { figure, pandoc.Para({ pandoc.Emph(note) }) }
end
