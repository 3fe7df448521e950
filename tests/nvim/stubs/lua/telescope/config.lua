return { values = { generic_sorter = function() return {} end, grep_previewer = function() return {} end } }
