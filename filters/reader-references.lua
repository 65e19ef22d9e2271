-- Reader notebooks (scripts/build/readers.py), last: images stay links to their files, and,
-- after citeproc, the works this notebook cites go
-- into a last markdown cell, "References", each entry behind an anchor that its citations
-- link to (`link-citations`). A notebook that cites nothing gets no such cell.

local function collect(doc)
  local blocks = pandoc.List()
  local works = nil
  for _, block in ipairs(doc.blocks) do
    if block.t == "Div" and block.identifier == "refs" then
      works = block
    else
      blocks:insert(block)
    end
  end
  if works and #works.content > 0 then
    local cell = pandoc.List({ pandoc.Header(2, "References") })
    for _, entry in ipairs(works.content) do
      cell:insert(pandoc.RawBlock("html", '<div id="' .. entry.identifier .. '"></div>'))
      cell:extend(entry.content)
    end
    blocks:insert(pandoc.Div(cell, pandoc.Attr("references", { "cell", "markdown" })))
  end
  doc.blocks = blocks
  return doc
end

-- citeproc capitalizes a URL that opens a sentence ("Https://...") and wraps names it must
-- not recase in spans, which Jupyter would show as HTML: print the address as it is.
local function plain_address(link)
  if link.classes:includes("uri") then
    return pandoc.Link(link.target, link.target)
  end
end

local function unwrap(span)
  return span.content
end

-- Pandoc's notebook writer would embed a local image in the cell as an attachment; a
-- reader notebook links to the file, as the chapter does.
local function linked_image(image)
  local alt = pandoc.write(pandoc.Pandoc({ pandoc.Plain(image.caption) }), "markdown")
  return pandoc.RawInline("markdown", "![" .. alt:gsub("%s+$", "") .. "](" .. image.src .. ")")
end

return { { Link = plain_address, Span = unwrap, Image = linked_image }, { Pandoc = collect } }
