---@mod saipling.query The filter prefixes of :SaiplingSearch (`book:` `type:` `upto:` `path:`), as in VS Code.
local M = {}

--- Prefix -> the `filter` field it sets in `saipling/search`.
M.prefixes = { book = "bookId", type = "entityTypes", upto = "maxChapter", path = "pathPrefix" }
M.prefix_order = { "book", "type", "upto", "path" }

--- `12`, `ch-12`, `ch12`, `chapter-12` -> 12.
---@param value string
---@return integer?
function M.chapter_number(value)
  local v = vim.trim(value):lower()
  local n = v:match("^%d+$") or v:match("^ch%-?(%d+)$") or v:match("^chapter%-?(%d+)$")
  return n and tonumber(n) or nil
end

--- Split the filter prefixes off a query. Unknown `word:` stays part of the query.
---@param text string
---@return string query, table filter, string[] errors
function M.parse(text)
  local filter, errors = {}, {}
  local function take(key, value)
    local k = key:lower()
    if not M.prefixes[k] then
      return nil -- keep the original text
    end
    value = vim.trim(value)
    if value == "" then
      errors[#errors + 1] = ("%s: needs a value"):format(k)
    elseif k == "book" then
      filter.bookId = value
    elseif k == "type" then
      filter.entityTypes = filter.entityTypes or {}
      for t in value:gmatch("[^,]+") do
        if vim.trim(t) ~= "" then
          table.insert(filter.entityTypes, vim.trim(t))
        end
      end
    elseif k == "upto" then
      local n = M.chapter_number(value)
      if n then
        filter.maxChapter = n
      else
        errors[#errors + 1] = ('upto: needs a chapter number, not "%s" (e.g. upto:12)'):format(value)
      end
    elseif k == "path" then
      filter.pathPrefix = value:gsub("\\", "/"):gsub("^%./", "")
    end
    return ""
  end
  local query = (" " .. text)
    :gsub('(%s)(%a+):"([^"]*)"?', function(lead, key, value)
      local r = take(key, value)
      return r and lead or nil
    end)
    :gsub("(%s)(%a+):(%S*)", function(lead, key, value)
      local r = take(key, value)
      return r and lead or nil
    end)
  query = vim.trim(query:gsub("%s+", " "))
  return query, filter, errors
end

--- `type character · up to chapter 12`.
---@param filter table
---@return string
function M.describe(filter)
  local parts = {}
  if filter.bookId then
    parts[#parts + 1] = "book " .. filter.bookId
  end
  if filter.entityTypes and #filter.entityTypes > 0 then
    parts[#parts + 1] = "type " .. table.concat(filter.entityTypes, ", ")
  end
  if filter.maxChapter then
    parts[#parts + 1] = "up to chapter " .. filter.maxChapter
  end
  if filter.pathPrefix then
    parts[#parts + 1] = "in " .. filter.pathPrefix
  end
  return table.concat(parts, " · ")
end

--- Folders under `root` (relative, with a trailing slash), at most `depth` levels down, hidden ones skipped.
local function folders(root, depth)
  local out = {}
  local ok, iter = pcall(vim.fs.dir, root, {
    depth = depth,
    skip = function(name)
      return not vim.startswith(name, ".") and name ~= "node_modules"
    end,
  })
  if not ok then
    return out
  end
  for name, kind in iter do
    if kind == "directory" and not name:find("/%.") and not vim.startswith(name, ".") then
      out[#out + 1] = name .. "/"
    end
  end
  table.sort(out)
  return out
end

--- Completion for :SaiplingSearch: the prefixes, then values for `type:`, `path:`, `book:`.
---@param arglead string the word being completed
---@param root? string the project root (for paths and books)
---@param types string[] entity types to offer after `type:`
---@return string[]
function M.complete(arglead, root, types)
  local key, value = arglead:match("^(%a+):(.*)$")
  local out = {}
  if not key or not M.prefixes[key:lower()] then
    for _, p in ipairs(M.prefix_order) do
      if vim.startswith(p .. ":", arglead) then
        out[#out + 1] = p .. ":"
      end
    end
    return out
  end
  key = key:lower()
  local candidates = {}
  if key == "type" then
    local done, last = value:match("^(.*,)([^,]*)$")
    done, last = done or "", last or value
    for _, t in ipairs(types) do
      if vim.startswith(t, last) then
        out[#out + 1] = "type:" .. done .. t
      end
    end
    return out
  elseif key == "path" and root then
    candidates = folders(root, 3)
  elseif key == "book" and root then
    for _, dir in ipairs(folders(root .. "/books", 1)) do
      candidates[#candidates + 1] = dir:sub(1, -2)
    end
  end
  for _, c in ipairs(candidates) do
    if vim.startswith(c, value) then
      out[#out + 1] = key .. ":" .. c
    end
  end
  return out
end

return M
