-- Reader notebooks (scripts/build/readers.py): a callout becomes a blockquote whose first line is
-- its title in bold, as Jupyter has no callouts. Any other div that is neither a notebook
-- cell nor a labelled figure or table, and any span, loses its fences and keeps its
-- content; links lose their attributes ({target="_blank"}), which Jupyter would show as text.

local TITLES = {
  note = "Note", tip = "Tip", important = "Important", warning = "Warning",
  caution = "Caution",
}

local function callout_kind(div)
  for _, class in ipairs(div.classes) do
    local kind = class:match("^callout%-(.+)$")
    if kind then
      return kind
    end
  end
  return nil
end

-- The title: the `title` attribute, else a heading that opens the callout, else the
-- callout's kind, as Quarto does.
local function take_title(div, kind)
  local content = div.content
  if div.attributes.title then
    return pandoc.read(div.attributes.title, "markdown").blocks[1].content, content
  end
  if content[1] and content[1].t == "Header" then
    return content[1].content, pandoc.List({ table.unpack(content, 2) })
  end
  return { pandoc.Str(TITLES[kind] or (kind:sub(1, 1):upper() .. kind:sub(2))) }, content
end

function Div(div)
  if div.classes:includes("cell") or div.identifier ~= "" then
    return nil -- a cell, or a labelled figure or table, which reader-crossref.lua numbers
  end
  local kind = callout_kind(div)
  if kind == nil then
    return div.content
  end
  local title, body = take_title(div, kind)
  local quote = pandoc.List({ pandoc.Para({ pandoc.Strong(title) }) })
  quote:extend(body)
  return pandoc.BlockQuote(quote)
end

function Span(span)
  return span.content
end

function SmallCaps(element)
  return element.content
end

function Link(link)
  link.attr = pandoc.Attr()
  return link
end
